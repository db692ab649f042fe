"""Kubernetes resource quantities ("500m", "2.5", "64Mi", "1G", "1e3").

Grammar (k8s.io/apimachinery resource.Quantity):
    <sign><digits>[.<digits>]<suffix>, suffix one of
    binary  Ki Mi Gi Ti Pi Ei
    decimal n u m "" k M G T P E
    exponent e<signed int> / E<signed int>
Values are computed exactly (fractions) and rounded up, as Kubernetes'
MilliValue()/Value() do.
"""

from __future__ import annotations

import re
from fractions import Fraction

from cri_resmgr.bounded import short

__all__ = ["parse_quantity", "parse_cpu_milli", "parse_bytes"]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
    "P": Fraction(10**15), "E": Fraction(10**18),
}
# ASCII digits only: "١" (an Arabic-Indic one) is no quantity Kubernetes would write.
_QUANTITY = re.compile(r"([+-]?)(\d+(?:\.\d*)?|\.\d+)(.*)", re.ASCII)
_EXPONENT = re.compile(r"[eE]([+-]?\d+)", re.ASCII)
MAX_LENGTH = 64  # Kubernetes' own quantities are far shorter; a longer text is no quantity


def parse_quantity(text: str | int | float) -> Fraction:
    """The exact value of a quantity; ValueError naming `text` if malformed."""
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise ValueError(f"not a Kubernetes quantity: {short(text)}")
    # YAML turns "cpu: 1" into an int; str() of an int or float is valid syntax.
    if isinstance(text, int) and text.bit_length() > 128 or isinstance(text, str) and len(text) > MAX_LENGTH:
        raise ValueError(f"not a Kubernetes quantity: {short(text)} (too long)")
    m = _QUANTITY.fullmatch(text if isinstance(text, str) else str(text))
    if not m:
        raise ValueError(f"not a Kubernetes quantity: {short(text)}")
    sign, number, suffix = m.groups()
    value = Fraction(number)
    if suffix in _BINARY:
        value *= _BINARY[suffix]
    elif suffix in _DECIMAL:
        value *= _DECIMAL[suffix]
    else:
        e = _EXPONENT.fullmatch(suffix)
        if not e or abs(int(e.group(1))) > 100:
            raise ValueError(f"not a Kubernetes quantity: {short(text)} (bad suffix {short(suffix)})")
        value *= Fraction(10) ** int(e.group(1))
    return -value if sign == "-" else value


def _ceil_non_negative(value: Fraction, text: object, what: str) -> int:
    if value < 0:
        raise ValueError(f"{what} must not be negative: {short(text)}")
    return -((-value.numerator) // value.denominator)


MAX_CPU_MILLI = 10**9  # a million CPUs: no node has more; a larger request is a mistake
MAX_BYTES = 2**63 - 1  # what the CRI's int64 fields hold


def parse_cpu_milli(text: str | int | float) -> int:
    """CPU quantity in millicores, rounded up: "500m" -> 500, "2.5" -> 2500."""
    milli = _ceil_non_negative(parse_quantity(text) * 1000, text, "CPU quantity")
    if milli > MAX_CPU_MILLI:
        raise ValueError(f"CPU quantity {short(text)} is more than any node has ({MAX_CPU_MILLI // 1000} CPUs)")
    return milli


def parse_bytes(text: str | int | float) -> int:
    """Memory quantity in bytes, rounded up: "64Mi" -> 67108864, "1G" -> 10**9."""
    value = _ceil_non_negative(parse_quantity(text), text, "memory quantity")
    if value > MAX_BYTES:
        raise ValueError(f"memory quantity {short(text)} is past what the CRI can carry (2^63-1 bytes)")
    return value
