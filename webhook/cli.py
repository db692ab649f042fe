"""`cri-resmgr-webhook`: flags in Go style (-cert-file) or GNU style
(--cert-file), a one-line error and exit 2 for bad usage, clean exit on
SIGTERM after in-flight reviews finish."""
from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Sequence

import click

from .server import DEFAULT_MAX_BODY_BYTES, DEFAULT_PORT, ServerConfig, WebhookServer
from .tls import CertificateError, server_context

PROG = "cri-resmgr-webhook"
EXIT_USAGE = 2
EXIT_RUNTIME = 1


class Fatal(Exception):
    """Ends the program with a one-line message and an exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@click.command(name=PROG, context_settings={"help_option_names": ["-h", "-help", "--help"]})
@click.option("-cert-file", "--cert-file", "cert_file", required=True, metavar="PATH",
              help="PEM serving certificate (with any intermediates).")
@click.option("-key-file", "--key-file", "key_file", required=True, metavar="PATH",
              help="PEM private key of the certificate, unencrypted.")
@click.option("-port", "--port", "port", type=click.IntRange(0, 65535), default=DEFAULT_PORT,
              show_default=True, help="HTTPS port; 0 picks a free one.")
@click.option("-bind-address", "--bind-address", "bind_address", default="0.0.0.0",
              show_default=True, help="Address to listen on ('::' for IPv6).")
@click.option("-max-body-bytes", "--max-body-bytes", "max_body_bytes", type=click.IntRange(1),
              default=DEFAULT_MAX_BODY_BYTES, show_default=True,
              help="Larger request bodies get HTTP 400.")
@click.option("-shutdown-grace", "--shutdown-grace", "shutdown_grace", type=click.FloatRange(0),
              default=10.0, show_default=True,
              help="Seconds in-flight reviews get to finish after SIGTERM.")
@click.option("-log-level", "--log-level", "log_level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False))
def command(cert_file: str, key_file: str, port: int, bind_address: str, max_body_bytes: int,
            shutdown_grace: float, log_level: str) -> None:
    """Mutating admission webhook: adds to every new pod the annotation
    intel.com/resources with each container's requests and limits."""
    logging.basicConfig(
        level=log_level.upper(), stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logger = logging.getLogger("cri_resmgr_webhook")
    try:
        context = server_context(cert_file, key_file)
    except CertificateError as err:
        raise Fatal(str(err), EXIT_USAGE) from err
    try:
        server = WebhookServer(
            (bind_address, port), context, ServerConfig(max_body_bytes=max_body_bytes), logger
        )
    except OSError as err:
        raise Fatal(f"cannot listen on {bind_address}:{port}: {err.strerror or err}", EXIT_RUNTIME) from err
    serve(server, shutdown_grace, logger)


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


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        command.main(args, prog_name=PROG, standalone_mode=False)
    except click.exceptions.Exit as done:  # --help
        return int(done.exit_code)
    except click.NoSuchOption as err:
        print(f"{PROG}: error: no such option {_unknown_option(args, err.option_name)!r}", file=sys.stderr)
        return EXIT_USAGE
    except click.UsageError as err:
        print(f"{PROG}: error: {err.format_message()}", file=sys.stderr)
        return EXIT_USAGE
    except click.Abort:
        return EXIT_RUNTIME
    except Fatal as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return err.code
    return 0


def _unknown_option(args: Sequence[str], reported: str) -> str:
    """The argument as typed: click reports '-bogus' as its first letter,
    '-b', having read it as a cluster of one-letter flags."""
    known = {opt for param in command.params for opt in param.opts + param.secondary_opts}
    for arg in args:
        name = arg.split("=", 1)[0]
        if name.startswith(reported) and name not in known:
            return name
    return reported
