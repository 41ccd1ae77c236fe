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
