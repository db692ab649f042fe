"""`cri-resmgr-webhook`: Go-style flags like the relay's and the agent's
(cri_resmgr.flags, which the image carries beside this package), a one-line
error and exit 2 for bad usage, clean exit on SIGTERM after in-flight reviews
finish."""
from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Sequence

from cri_resmgr import __version__, flags

from .server import DEFAULT_MAX_BODY_BYTES, DEFAULT_PORT, ServerConfig, WebhookServer
from .tls import CertificateError, server_context

PROG = "cri-resmgr-webhook"
EXIT_USAGE = flags.EXIT_USAGE
EXIT_RUNTIME = 1

CERT_FILE = flags.text("cert-file", "PATH", "PEM serving certificate (with any intermediates).", "",
                       required=True)
KEY_FILE = flags.text("key-file", "PATH", "PEM private key of the certificate, unencrypted.", "", required=True)
PORT = flags.option("port", "PORT", "HTTPS port; 0 picks a free one.", DEFAULT_PORT, flags.integer(0, 65535))
BIND_ADDRESS = flags.text("bind-address", "ADDRESS", "Address to listen on ('::' for IPv6).", "0.0.0.0")
MAX_BODY_BYTES = flags.option("max-body-bytes", "BYTES", "Larger request bodies get HTTP 400.",
                              DEFAULT_MAX_BODY_BYTES, flags.integer(1))
SHUTDOWN_GRACE = flags.option("shutdown-grace", "SECONDS", "Seconds in-flight reviews get to finish after SIGTERM.",
                              10.0, flags.number(0))
LOG_LEVEL = flags.choice("log-level", "Logging threshold.", ("debug", "info", "warning", "error"), "info")
LOGGER_DEBUG = flags.switch("logger-debug", "Debug logging, as -log-level debug (the relay's flag).")
LOG_FORMAT = flags.log_format()

COMMAND = flags.Command(
    PROG,
    "Mutating admission webhook: adds to every new pod the annotation intel.com/resources with each "
    "container's requests and limits.",
    (CERT_FILE, KEY_FILE, PORT, BIND_ADDRESS, MAX_BODY_BYTES, SHUTDOWN_GRACE, LOG_LEVEL, LOGGER_DEBUG,
     LOG_FORMAT),
    version=__version__,
)


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point; returns the exit code."""
    return COMMAND.run(sys.argv[1:] if argv is None else argv, _run)


def _run(values: flags.Values) -> int:
    logging.basicConfig(level="DEBUG" if values[LOGGER_DEBUG] else values[LOG_LEVEL].upper(), stream=sys.stderr)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(flags.log_formatter(values[LOG_FORMAT]))
    logger = logging.getLogger("cri_resmgr_webhook")
    try:
        context = server_context(values[CERT_FILE], values[KEY_FILE])
    except CertificateError as err:
        raise flags.UsageError(str(err)) from err
    address = (values[BIND_ADDRESS], values[PORT])
    try:
        server = WebhookServer(address, context, ServerConfig(max_body_bytes=values[MAX_BODY_BYTES]), logger)
    except OSError as err:
        raise flags.CommandError(f"cannot listen on {address[0]}:{address[1]}: {err.strerror or err}",
                                 EXIT_RUNTIME) from err
    serve(server, values[SHUTDOWN_GRACE], logger)
    return 0


def serve(server: WebhookServer, shutdown_grace: float, logger: logging.Logger) -> None:
    """Serves until SIGTERM or SIGINT, then drains and closes."""
    stopping = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        if not stopping.is_set():
            stopping.set()
            logger.info("%s received: stopping", signal.Signals(signum).name)
            # shutdown() waits for serve_forever(), which runs in this very
            # thread: it must be called from another one.
            threading.Thread(target=server.shutdown, name="shutdown", daemon=True).start()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    host = server.server_name
    logger.info("listening on https://%s:%d", f"[{host}]" if ":" in host else host, server.port)
    try:
        server.serve_forever()
        if not server.drain(shutdown_grace):
            logger.warning("reviews still in flight after %.1fs: closing anyway", shutdown_grace)
    finally:
        server.server_close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    logger.info("stopped")
