"""netstorm.launcher.processes: the launcher's child processes, their failures as reported,
and who is blamed for one."""

from netstorm.geoserver.config.exit_reasons import EXIT_ABORTED, write_reason
from netstorm.launcher.processes import FAILURE_END, Proc


def test_a_failure_that_followed_another_nodes_is_told_by_exit_code_or_reason_file(tmp_path):
    """A server or scheduler that exits EXIT_ABORTED, or any node whose reason file says so,
    only followed another node's failure; a worker's EXIT_ABORTED alone does not."""
    why = tmp_path / "why"
    server, worker = Proc("server dc0", "server", None, reason_file=str(why)), \
        Proc("worker dc0/0", "worker", None, reason_file=str(why))
    assert server.follows(EXIT_ABORTED) and not server.follows(1)
    assert not worker.follows(EXIT_ABORTED) and worker.reason() == ("", False)
    write_reason(str(why), "lost the scheduler\nmore", caused_by_other=True)
    assert worker.follows(1) and worker.reason() == ("lost the scheduler", True)
    host = Proc("host a", "host", None, said="host a: worker dc1/0 died" + FAILURE_END)
    assert host.reason() == ("host a: worker dc1/0 died", False)


def test_a_worker_never_joined_until_its_joined_file_exists(tmp_path):
    joined = tmp_path / "joined"
    worker = Proc("worker dc0/0", "worker", None, joined_file=str(joined))
    assert worker.never_joined()
    joined.touch()
    assert not worker.never_joined()
    assert not Proc("ps worker", "worker", None).never_joined()     # unchecked


def test_a_worker_that_never_joined_is_told_by_its_reason_if_it_left_one(tmp_path):
    """A worker's Python that could not import netstorm (started by a wrapper script that
    then exits 0) left why: the launcher's line gives that, not a guess at the store's name."""
    import io

    from netstorm.launcher.processes import Launcher
    why = tmp_path / "why"
    out = io.StringIO()
    worker = Proc("worker dc0/0", "worker", None, reason_file=str(why),
                  joined_file=str(tmp_path / "joined"))
    assert Launcher(out)._never_joined(worker) == 1
    assert "(is the store's name spelled 'netstorm'" in out.getvalue()
    write_reason(str(why), "this worker's Python (/usr/bin/python3) cannot import netstorm")
    out = io.StringIO()
    assert Launcher(out)._never_joined(worker) == 1
    assert out.getvalue() == (
        "[launch] worker dc0/0 exited with code 0 without joining the cluster: it never "
        "created the 'netstorm' kvstore; it said: this worker's Python (/usr/bin/python3) "
        "cannot import netstorm" + FAILURE_END + "\n")


class _Exited:
    """A child process that already exited (nothing to signal)."""
    pid = 0

    def poll(self):
        return 0


def _elastic_launcher(min_dcs):
    import io

    from netstorm.launcher.processes import Launcher
    launcher = Launcher(io.StringIO(), min_dcs=min_dcs)
    for dc in ("dc0", "dc1", "dc2"):
        launcher.procs += [Proc(f"server {dc}", "server", _Exited(), dc=dc),
                           Proc(f"worker {dc}/0", "worker", _Exited(), dc=dc)]
    return launcher


def test_elastic_a_dc_whose_server_dies_leaves_and_the_others_finish_the_run():
    """``min_dcs`` 2 of 3: dc2's server killed, its worker then stopped: the run goes on
    and ends 0 once the two other workers finished; a second DC lost is fatal."""
    launcher = _elastic_launcher(min_dcs=2)
    procs = {p.name: p for p in launcher.procs}
    for name, code in (("server dc2", -9), ("worker dc2/0", -15), ("worker dc0/0", 0),
                       ("worker dc1/0", 0), ("server dc0", 0), ("server dc1", 0)):
        launcher.events.put((procs[name], code))
    assert launcher.wait(3) == 0
    assert launcher.left == {"dc2"}
    assert "[launch] server dc2 was killed by SIGKILL; dc2 leaves the run (2 DC(s) remain, " \
        "min_dcs 2)" in launcher.out.getvalue()
    launcher = _elastic_launcher(min_dcs=2)
    procs = {p.name: p for p in launcher.procs}
    launcher.events.put((procs["server dc2"], -9))
    launcher.events.put((procs["worker dc1/0"], 1))
    assert launcher.wait(3) == 1 and launcher.left == {"dc2"}
    assert "worker dc1/0 exited with code 1; stopping the cluster" in launcher.out.getvalue()


def test_without_min_dcs_a_dead_server_stops_the_cluster_as_before():
    launcher = _elastic_launcher(min_dcs=0)
    launcher.events.put((launcher.procs[4], -9))
    assert launcher.wait(3) == 1
    assert not launcher.left and "stopping the cluster" in launcher.out.getvalue()


def test_elastic_joining_dcs_start_once_the_others_joined_and_are_awaited_like_them(tmp_path):
    """``join_later``: nothing starts while a worker started so far has not joined (its
    joined file is missing) or the cue file is missing; then the joining DC's processes
    start and the run waits for its worker too."""
    import io

    from netstorm.launcher.processes import Launcher

    class _Running(_Exited):
        def poll(self):
            return None

    launcher = Launcher(io.StringIO(), min_dcs=1)
    joined, cue = tmp_path / "joined", tmp_path / "cue"
    first = Proc("worker dc0/0", "worker", _Running(), dc="dc0", joined_file=str(joined))
    launcher.procs.append(first)
    starts = []

    def start():
        starts.append(1)
        late = Proc("worker dc1/0", "worker", _Exited(), dc="dc1")
        launcher.procs.append(late)
        launcher.events.put((first, 0))
        launcher.events.put((late, 0))

    launcher.join_later(0.0, start, ["dc1"], when=str(cue))
    pending = {"worker dc0/0"}
    assert launcher._join_due(pending, None) is None and not starts     # not joined yet
    joined.touch()
    assert launcher._join_due(pending, None) is None and not starts     # no cue yet
    cue.touch()
    assert launcher.wait(2) == 0 and starts == [1]
    assert "[launch] starting dc1: joining the running cluster" in launcher.out.getvalue()


def test_elastic_a_scheduler_that_finished_ends_the_wait_for_a_dc_still_joining():
    """The scheduler exits 0 once every member's worker finished: a DC that started too
    late to join is not awaited (its processes are stopped after the grace period)."""
    import io

    from netstorm.launcher import processes
    from netstorm.launcher.processes import Launcher

    launcher = Launcher(io.StringIO(), min_dcs=1)
    done = [Proc("scheduler", "scheduler", _Exited()),     # before its worker's exit
            Proc("worker dc0/0", "worker", _Exited(), dc="dc0")]
    late = Proc("worker dc1/0", "worker", _Exited(), dc="dc1")
    launcher.procs += done + [late]
    for proc in done:
        launcher.events.put((proc, 0))
    grace, processes.SHUTDOWN_GRACE_S = processes.SHUTDOWN_GRACE_S, 0.01
    try:
        assert launcher.wait(2) == 0
    finally:
        processes.SHUTDOWN_GRACE_S = grace
    assert "still running" in launcher.out.getvalue() and "worker dc1/0" in \
        launcher.out.getvalue()


def test_elastic_a_dc_taken_out_of_the_run_starts_again_to_rejoin_once_its_processes_ended():
    """dc2's server says its DC left (EXIT_LEFT: it was stopped, the others went on):
    dc2 leaves, its worker is stopped, and once both ended they start again (server
    first), as they were started, and the run awaits the new worker; one rejoin only."""
    from netstorm.geoserver.config.exit_reasons import EXIT_LEFT

    launcher = _elastic_launcher(min_dcs=2)
    launcher.rejoins_left = 1
    procs = {p.name: p for p in launcher.procs}
    for proc in launcher.procs:
        proc.start = ([proc.name], {}, None)
    started = []

    def start(name, role, argv, env, wrap, reason_file="", joined_file="", dc=""):
        started.append(name)
        new = Proc(name, role, _Exited(), dc=dc, start=(argv, env, wrap))
        launcher.procs.append(new)
        launcher.events.put((new, 0))           # the new one finishes its steps
        return new

    launcher.start = start
    for name, code in (("server dc2", EXIT_LEFT), ("worker dc2/0", -15),
                       ("worker dc0/0", 0), ("worker dc1/0", 0), ("server dc0", 0),
                       ("server dc1", 0)):
        launcher.events.put((procs[name], code))
    assert launcher.wait(3) == 0
    assert started == ["server dc2", "worker dc2/0"] and launcher.rejoins_left == 0
    out = launcher.out.getvalue()
    assert "server dc2 exited with code 5; dc2 leaves the run (2 DC(s) remain, min_dcs 2); " \
        "it starts again to rejoin once its processes ended" in out
    assert "starting dc2 again: it rejoins the running cluster (0 rejoin(s) left)" in out
    assert not launcher.left and procs["server dc2"] not in launcher.procs
