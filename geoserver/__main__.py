"""``python -m netstorm.geoserver --cluster FILE --dc NAME``: run one DC's server.

Whatever stops it, the launcher's line says why: netstorm's own errors in their words, any
other error as ``Type: message`` (the catch-all of :func:`main`), also told to the scheduler
once the server registered, so the other nodes stop naming it."""
from __future__ import annotations

import argparse
import logging
import sys

from .cli import Terminated, add_log_level_flags, run_entry_point, start_node
from .config.exit_reasons import (EXIT_ABORTED, EXIT_LEFT, describe, read_stop_note,
                                  write_reason)
from .model import checkpoint
from .config.cluster import ClusterFileError, load_cluster
from .config.emulation import receive_delays
from .core.heap import return_large_buffers
from .core.nodes import SERVER
from .core.postoffice import AbortedByScheduler, AbortError, Postoffice, RendezvousError
from .server.geoserver import GeoServer
from .core.metrics import MetricsError, serve_metrics
from .server.metrics import ServerCollector
from .core.security import node_credentials
from .core.van import TransportError, Van
from .core.wire import Kind, Message

log = logging.getLogger("netstorm.server")


def main(argv=None) -> int:
    """Run one DC's server; an unexpected error ends it with code 1, its ``Type: message``
    left for the launcher's line (:func:`~netstorm.geoserver.cli.run_entry_point`)."""
    args = parse_args(argv)
    return run_entry_point(run, args, log, f"server of {args.dc}")


def _tell_scheduler(postoffice, reason: str) -> None:
    """ABORT to the scheduler, which stops the other nodes naming ``reason``, if this
    server registered (before, the scheduler would drop it); best effort: the server is
    failing anyway."""
    if postoffice is None or postoffice.me is None:
        return
    try:
        postoffice.send_scheduler(Message(Kind.ABORT, meta={"reason": reason}))
    except TransportError:
        pass


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m netstorm.geoserver",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--cluster", required=True, help="cluster file (TOML)")
    parser.add_argument("--dc", required=True, help="name of this server's DC")
    parser.add_argument("--run-dir", default="",
                        help="folder for this server's same-host socket (default: the "
                             "temporary folder); the launcher gives its run's folder")
    parser.add_argument("--reason-file", default="",
                        help="where to leave why the server stopped, if it fails")
    add_log_level_flags(parser)
    return parser.parse_args(argv)


def run(args) -> int:
    """The server's life: read the cluster file, bind, register, serve until shut down."""
    return_large_buffers()

    def build():
        config = load_cluster(args.cluster)
        dc = config.dc(args.dc)
        credentials = node_credentials(config.security, dc.name, config.source)
        try:    # before registering: a bad checkpoint stops the run at once, named
            resumed = checkpoint.read(config.resume) if config.resume else None
        except checkpoint.CheckpointError as exc:
            raise ClusterFileError(f"[recovery] resume: {exc}") from None
        delays = receive_delays(config.emulation, {d.name: d.host for d in config.dcs},
                                dc.host, ClusterFileError)
        return config, dc, resumed, Van(f"server {dc.name}", dc.host, dc.server_port,
                               credentials=credentials, local_dir=args.run_dir,
                               advertise=dc.advertise, delays=delays,
                               wakeable=True,   # a refused handshake ends registration
                               bulk=config.security.bulk, bulk_port=dc.bulk_port)
    built, stop = start_node(build, log, args.reason_file)
    if built is None:
        return 2
    config, dc, resumed, van = built
    postoffice = None
    metrics = ServerCollector(dc.name)      # shows the server once built
    try:
        endpoint = serve_metrics(config.metrics, metrics, f"server-{dc.name}",
                                 dc.server_host, {"role": "server", "dc": dc.name})
    except MetricsError as exc:
        log.error("server of %s: %s", dc.name, exc)
        write_reason(args.reason_file, str(exc))
        van.close()
        return 2
    try:
        postoffice = Postoffice(van, config.scheduler_address, SERVER, dc.name)
        postoffice.register(config.timeout_s)
        log.info("server of %s is node %d at %s", dc.name, postoffice.me.id, van.address)
        server = GeoServer(postoffice, check_stop=stop.check, resumed=resumed)
        metrics.attach(server)
        server.serve()
        return 0
    except AbortedByScheduler as exc:
        log.error("server of %s stops: %s", dc.name, exc)
        write_reason(args.reason_file, str(exc), caused_by_other=True)
        return EXIT_LEFT if exc.left else EXIT_ABORTED
    except AbortError as exc:
        log.error("server of %s stops: %s", dc.name, exc)
        write_reason(args.reason_file, str(exc))
        try:   # tell the scheduler, which stops the other nodes naming the reason
            postoffice.send_scheduler(Message(Kind.ABORT, meta={"reason": str(exc)}))
        except TransportError:
            pass
        return 1
    except RendezvousError as exc:
        log.error("server of %s stops: %s", dc.name, exc)
        write_reason(args.reason_file, str(exc), caused_by_other=exc.caused_by_other)
        return EXIT_ABORTED if exc.caused_by_other else 1
    except Exception as exc:    # not netstorm's own: main names it; the others hear it now
        _tell_scheduler(postoffice, f"server of {dc.name} failed: {describe(exc)}")
        raise
    except Terminated as exc:
        note = read_stop_note(args.run_dir)
        reason = f"stopped by {exc}" + (f" from its launcher, after: {note}" if note else "")
        log.warning("server of %s %s", dc.name, reason)
        write_reason(args.reason_file, reason)
        # the scheduler stops the others now, naming why, not after dead_after_s
        _tell_scheduler(postoffice, reason)
        return 1
    finally:
        stop.quiet()
        van.close()
        if endpoint is not None:
            endpoint.close()


if __name__ == "__main__":
    sys.exit(main())
