"""``python -m netstorm.scheduler --cluster FILE``: run the scheduler of a netstorm cluster.

Whatever stops it, the launcher's line says why: netstorm's own errors in their words, any
other error as ``Type: message`` (the catch-all of :func:`main`)."""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time

from netstorm.geoserver.cli import (Terminated, add_log_level_flags, run_entry_point,
                                    start_node)
from netstorm.geoserver.config.exit_reasons import write_reason
from netstorm.geoserver.core import wire
from netstorm.geoserver.config.cluster import ClusterFileError, load_cluster
from netstorm.geoserver.config.emulation import receive_delays
from netstorm.geoserver.core.heap import return_large_buffers
from netstorm.geoserver.core.security import node_credentials
from netstorm.geoserver.config.keys import SCHEDULER_PRINCIPAL
from netstorm.geoserver.core.van import Van
from netstorm.geoserver.core.metrics import MetricsError, serve_metrics

from .metrics import SchedulerMetrics
from .service import Scheduler
from .status import ClusterStatus
from .status_server import StatusServer, StatusServerError

log = logging.getLogger("netstorm.scheduler")


def main(argv=None) -> int:
    """Run the scheduler; an unexpected error ends it with code 1, its ``Type: message``
    left for the launcher's line (:func:`~netstorm.geoserver.cli.run_entry_point`)."""
    args = parse_args(argv)
    return run_entry_point(run, args, log, "the scheduler")


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m netstorm.scheduler",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--cluster", required=True, help="cluster file (TOML)")
    add_log_level_flags(parser)
    parser.add_argument("--switch-policy-every", type=float, default=0.0, metavar="S",
                        help="testing: announce a random policy every S seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reason-file", default="",
                        help="where to leave why the run was aborted, if it was")
    return parser.parse_args(argv)


def run(args) -> int:
    """The scheduler's life: read the cluster file, bind, run until the workers are done."""
    return_large_buffers()

    def build():
        config = load_cluster(args.cluster)
        credentials = node_credentials(config.security, SCHEDULER_PRINCIPAL, config.source)
        # only control messages come here (meta, no tensor frames): a larger frame is an
        # attack, refused by ZeroMQ before it is allocated
        delays = receive_delays(config.emulation, {d.name: d.host for d in config.dcs},
                                config.scheduler_host, ClusterFileError)
        return config, Van("scheduler", config.scheduler_host, config.scheduler_port,
                           max_frame_bytes=wire.MAX_META_BYTES, credentials=credentials,
                           advertise=config.scheduler_advertise, delays=delays,
                           wakeable=True)   # a node's closed connection wakes the loop
    built, stop = start_node(build, log, args.reason_file)
    if built is None:
        return 2
    config, van = built
    stats_file = endpoint = None
    metrics = SchedulerMetrics()        # fed the stats records, served with [metrics]
    try:
        if config.stats:
            stats_file = open(config.stats, "a", encoding="utf-8")
        endpoint = serve_metrics(config.metrics, metrics, "scheduler",
                                 config.scheduler_reached_at, {"role": "scheduler"})
    except (OSError, MetricsError) as exc:
        why = str(exc) if isinstance(exc, MetricsError) else \
            f"cannot open the stats file {config.stats}: {exc.strerror}"
        log.error("%s", why)
        write_reason(args.reason_file, why)
        van.close()
        if stats_file is not None:
            stats_file.close()
        return 2

    def stats(record: dict) -> None:
        if stats_file is not None:
            stats_file.write(json.dumps(record, separators=(",", ":")) + "\n")
            stats_file.flush()
        metrics.observe(record)

    status, page = ClusterStatus(config, time.monotonic()), None
    try:
        if config.status.on:
            page = StatusServer(config.status.host, config.status.port,
                                status.json_bytes).start()
        scheduler = Scheduler(config, van, args.switch_policy_every, args.seed,
                              status.stats_sink(stats), check_stop=stop.check, status=status)
        metrics.attach(scheduler)
        code = scheduler.run()
        if code:
            write_reason(args.reason_file, scheduler.abort_reason, caused_by_other=True)
        return code
    except Terminated as exc:
        log.warning("stopped by %s", exc)
        write_reason(args.reason_file, f"stopped by {exc}")
        return 1
    except StatusServerError as exc:
        log.error("%s", exc)
        write_reason(args.reason_file, str(exc))
        return 2
    finally:
        stop.quiet()
        if page is not None:
            page.close()
        van.close()
        if stats_file is not None:
            stats_file.close()
        if endpoint is not None:
            endpoint.close()


if __name__ == "__main__":
    sys.exit(main())
