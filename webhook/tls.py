"""The serving TLS context: TLS 1.2 or newer, with errors that name the file."""
from __future__ import annotations

import ssl


class CertificateError(Exception):
    """The certificate or key file cannot be used; the message names it."""


def server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """Returns a server-side context serving cert_file with key_file."""
    for what, path in (("certificate", cert_file), ("key", key_file)):
        try:
            with open(path, "rb") as f:
                f.read(1)
        except OSError as err:
            raise CertificateError(f"cannot read {what} file {path}: {err.strerror or err}") from err
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        # Parsing the certificate alone first tells a bad certificate file
        # from a bad key file, which load_cert_chain's errors do not.
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=cert_file)
    except ssl.SSLError as err:
        raise CertificateError(f"certificate file {cert_file} holds no PEM certificate: {err}") from err
    def refuse_passphrase() -> bytes:
        # OpenSSL would otherwise prompt on a terminal a pod does not have.
        raise CertificateError(f"key file {key_file} is encrypted; give an unencrypted key")

    try:
        context.load_cert_chain(cert_file, key_file, password=refuse_passphrase)
    except ssl.SSLError as err:
        if "KEY_VALUES_MISMATCH" in str(err):
            raise CertificateError(
                f"key file {key_file} does not match certificate file {cert_file}"
            ) from err
        raise CertificateError(f"key file {key_file} holds no usable PEM private key: {err}") from err
    return context
