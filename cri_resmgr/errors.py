"""The root of cri-resmgr's own exceptions.

Every error class the project raises on purpose derives from CriResmgrError,
so a caller can tell "cri-resmgr refused or failed, and says why" from a bug
(TypeError, AttributeError, ...), which must not be caught as one of these.
Classes that were ValueErrors stay ValueErrors too, so existing handlers keep
working. This module imports nothing, so every layer may use it.
"""


class CriResmgrError(Exception):
    """An error cri-resmgr reports on purpose; its message says what was wrong."""
