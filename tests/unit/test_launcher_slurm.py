"""launch --slurm without a Slurm: node lists from the job's variables (scontrol answered by
a fake), each DC's nodes, the placement of a whole cluster and of one DC per job, the srun
steps, and the errors that name what to change. The live test is
tests/cluster/test_launch_slurm.py."""
import subprocess
from argparse import Namespace

import pytest

from netstorm.geoserver.config.cluster import ClusterFileError, parse_cluster, pseudo_cluster
from netstorm.launcher import cli, placement
from netstorm.launcher.slurm import (Allocation, Share, SlurmError, dc_node_sets,
                                     expand_hostlist, node_addresses, place_one_dc,
                                     place_whole, plan, read_allocation, run_in_allocation,
                                     shares_of, srun_argv)

HOSTLISTS = {"n[1-4]": "n1\nn2\nn3\nn4\n", "n1": "n1\n", "n[2-3]": "n2\nn3\n",
             "gw,c[7-8]": "gw\nc7\nc8\n"}


class FakeScontrol:
    """``scontrol show hostnames`` from :data:`HOSTLISTS`; ``show node`` gives node nX
    the address 10.0.0.X (gw: no NodeAddr, so its name); records every call."""

    def __init__(self, fail: str = ""):
        self.calls = []
        self.fail = fail

    def __call__(self, argv, **_kw):
        self.calls.append(argv)
        if self.fail:
            return subprocess.CompletedProcess(argv, 1, "", self.fail)
        if argv[1:3] == ["show", "hostnames"]:
            return subprocess.CompletedProcess(argv, 0, HOSTLISTS.get(argv[3], ""), "")
        names = argv[-1].split(",")
        lines = [f"NodeName={n} Arch=x86_64 NodeAddr={n} State=IDLE" if not n[1:].isdigit()
                 else f"NodeName={n} Arch=x86_64 NodeAddr=10.0.0.{n[1:]} State=IDLE"
                 for n in names]
        return subprocess.CompletedProcess(argv, 0, "\n".join(lines) + "\n", "")


def fake_resolve(value, where, error):
    if value.startswith("10."):
        return value
    if value == "gw":
        return "10.0.9.1"
    raise error(f"{where}: host name {value!r} does not resolve on this host")


def addresses(names):
    return node_addresses(names, FakeScontrol(), fake_resolve)


def args(**kw):
    base = dict(dc=None, scheduler=None, cluster=None, command=["true"], as_dist_sync=False)
    return Namespace(**{**base, **kw})


CLUSTER = """
[scheduler]
host = "10.0.9.1"
port = 9000
[[dc]]
name = "eu"
host = "10.0.9.1"
server_port = 9100
workers = 3
[[dc]]
name = "us"
host = "10.1.0.1"
server_port = 9100
workers = 2
[security]
curve = false
"""


def cluster():
    import tomllib
    return parse_cluster(tomllib.loads(CLUSTER), "c.toml")


# --- the allocation ----------------------------------------------------------------------

def test_a_plain_job_is_one_group_of_slurms_expanded_node_names():
    run = FakeScontrol()
    got = read_allocation({"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-4]"}, run)
    assert got == Allocation("7", (("n1", "n2", "n3", "n4"),))
    assert run.calls == [["scontrol", "show", "hostnames", "n[1-4]"]]
    assert got.nodes == ["n1", "n2", "n3", "n4"]


def test_a_heterogeneous_job_is_a_group_per_component():
    env = {"SLURM_JOB_ID": "8", "SLURM_HET_SIZE": "2", "SLURM_JOB_NODELIST": "n1",
           "SLURM_JOB_NODELIST_HET_GROUP_0": "n1", "SLURM_JOB_NODELIST_HET_GROUP_1": "n[2-3]"}
    got = read_allocation(env, FakeScontrol())
    assert got == Allocation("8", (("n1",), ("n2", "n3")), heterogeneous=True)
    del env["SLURM_JOB_NODELIST_HET_GROUP_1"]
    with pytest.raises(SlurmError, match="heterogeneous job 8 has no "
                                         "SLURM_JOB_NODELIST_HET_GROUP_1"):
        read_allocation(env, FakeScontrol())


def test_outside_an_allocation_the_error_says_where_to_run():
    with pytest.raises(SlurmError, match=r"not inside a Slurm allocation \(SLURM_JOB_ID is "
                                         r"not set\); run netstorm-launch from an sbatch"):
        read_allocation({}, FakeScontrol())
    with pytest.raises(SlurmError, match="job 3 has no SLURM_JOB_NODELIST"):
        read_allocation({"SLURM_JOB_ID": "3"}, FakeScontrol())


def test_scontrol_failures_are_named():
    with pytest.raises(SlurmError, match=r"'scontrol show hostnames n\[1-4\]' failed: "
                                         r"Invalid hostlist"):
        expand_hostlist("n[1-4]", FakeScontrol(fail="Invalid hostlist"))

    def missing(argv, **_kw):
        raise FileNotFoundError(argv[0])
    with pytest.raises(SlurmError, match="'scontrol' is not on PATH"):
        expand_hostlist("n1", missing)
    with pytest.raises(SlurmError, match="names no node"):
        expand_hostlist("empty", FakeScontrol())


def test_node_addresses_are_slurms_nodeaddr_resolved_else_the_name():
    assert addresses(["n1", "gw"]) == {"n1": "10.0.0.1", "gw": "10.0.9.1"}
    with pytest.raises(SlurmError, match=r"node zz \(NodeAddr\): host name 'zz' does not"):
        addresses(["zz"])


# --- each DC's nodes -----------------------------------------------------------------------

def test_a_plain_jobs_nodes_are_cut_into_contiguous_blocks_per_dc():
    four = Allocation("1", (("n1", "n2", "n3", "n4"),))
    assert dc_node_sets(four, ["a", "b"]) == [[("n1", None), ("n2", None)],
                                              [("n3", None), ("n4", None)]]
    assert [len(s) for s in dc_node_sets(four, ["a", "b", "c"])] == [1, 1, 2]
    five = Allocation("1", (("n1", "n2", "n3", "n4", "n5"),))
    assert [[n for n, _ in s] for s in dc_node_sets(five, ["a", "b"])] == \
        [["n1", "n2"], ["n3", "n4", "n5"]]


def test_fewer_nodes_than_dcs_share_nodes_round_robin():
    two = Allocation("1", (("n1", "n2"),))
    assert dc_node_sets(two, ["a", "b", "c"]) == [[("n1", None)], [("n2", None)],
                                                  [("n1", None)]]


def test_a_heterogeneous_job_gives_component_i_to_dc_i_and_must_match_the_dcs():
    het = Allocation("9", (("n1",), ("n2", "n3")), heterogeneous=True)
    assert dc_node_sets(het, ["eu", "us"]) == [[("n1", 0)], [("n2", 1), ("n3", 1)]]
    with pytest.raises(SlurmError, match=r"heterogeneous job 9 has 2 component\(s\), the "
                                         r"cluster 3 DC\(s\) \(a, b, c\): give one "
                                         r"component per DC"):
        dc_node_sets(het, ["a", "b", "c"])


# --- placement of the whole cluster ------------------------------------------------------------

def test_whole_cluster_server_on_each_dcs_first_node_workers_in_turn():
    nodes = Allocation("1", (("n1", "n2", "n3", "n4"),))
    config = place_whole(cluster(), dc_node_sets(nodes, ["eu", "us"]),
                         addresses(nodes.nodes))
    eu, us = config.dcs
    assert (eu.host, eu.advertise, eu.worker_hosts) == ("10.0.0.1", "", ("10.0.0.1",
                                                                          "10.0.0.2"))
    assert [eu.worker_host(i) for i in range(3)] == ["10.0.0.1", "10.0.0.2", "10.0.0.1"]
    assert us.server_host == "10.0.0.3" and us.worker_host(1) == "10.0.0.4"
    assert config.scheduler_reached_at == "10.0.0.1" and config.scheduler_port == 9000
    assert (eu.server_port, config.security.curve) == (9100, False)    # the file's, kept
    assert placement.on_host(config, "10.0.0.2").describe() == "worker eu/1"


def test_dcs_sharing_a_node_with_one_fixed_port_are_refused():
    one = Allocation("1", (("n1",),))
    with pytest.raises(SlurmError, match="the server of eu and the server of us would both "
                                         "bind 10.0.0.1:9100"):
        place_whole(cluster(), dc_node_sets(one, ["eu", "us"]), addresses(["n1"]))
    free = pseudo_cluster(2, 1, 9000)       # servers on free ports: they may share
    config = place_whole(free, dc_node_sets(one, ["dc0", "dc1"]), addresses(["n1"]))
    assert placement.hosts(config) == ["10.0.0.1"]


def test_a_heterogeneous_plan_starts_one_step_per_node_in_its_component():
    het = Allocation("9", (("n1",), ("n2", "n3")), heterogeneous=True)
    config, shares, whole = plan(cluster(), args(), het, FakeScontrol(), fake_resolve)
    assert whole
    assert shares == [Share("n1", "10.0.0.1", 0), Share("n2", "10.0.0.2", 1),
                      Share("n3", "10.0.0.3", 1)]
    assert srun_argv(shares[2], "/venv/bin/python") == [
        "srun", "--het-group=1", "--nodes=1", "--ntasks=1", "--ntasks-per-node=1",
        "--nodelist=n3", "--overlap", "--whole", "--cpu-bind=none", "--job-name=netstorm-n3",
        "/venv/bin/python", "-P", "-m", "netstorm.launcher.remote"]
    assert "--het-group" not in " ".join(srun_argv(Share("n1", "10.0.0.1"), "python"))


# --- one job per DC ----------------------------------------------------------------------------

def test_one_dc_per_job_workers_on_the_jobs_nodes_server_and_scheduler_from_the_file():
    job = Allocation("5", (("c7", "gw", "c8"),))
    config, started = place_one_dc(cluster(), "eu", job.nodes,
                                   {"gw": "10.0.9.1", "c7": "10.0.0.7", "c8": "10.0.0.8"},
                                   None)
    eu = config.dc("eu")
    assert eu.server_host == "10.0.9.1"                      # the file's, which others dial
    assert eu.worker_hosts == ("10.0.9.1", "10.0.0.7", "10.0.0.8")   # server's node first
    assert config.dc("us") == cluster().dc("us")
    assert started == ["10.0.0.7", "10.0.9.1", "10.0.0.8"]
    assert placement.on_host(config, "10.0.9.1").describe() == "scheduler, server eu, " \
                                                              "worker eu/0"


def test_one_dc_per_job_refuses_a_job_without_its_servers_host():
    with pytest.raises(SlurmError, match=r"\[\[dc\]\] us places its server on 10.1.0.1, "
                                         r"which is not a node of this job \(n1 \(10.0.0.1\)\)"
                                         r": submit the job with that node \(sbatch "
                                         r"--nodelist=NODE\)"):
        place_one_dc(cluster(), "us", ["n1"], {"n1": "10.0.0.1"}, None)


def test_one_dc_per_job_scheduler_flags_must_agree_with_the_file():
    nodes = {"gw": "10.0.9.1"}
    with pytest.raises(SlurmError, match="--no-scheduler: c.toml places the scheduler on "
                                         "10.0.9.1, a node of this job"):
        place_one_dc(cluster(), "eu", ["gw"], nodes, False)
    us_nodes = {"u": "10.1.0.1"}
    with pytest.raises(SlurmError, match="--scheduler: c.toml places the scheduler on "
                                         "10.0.9.1, not a node of this job"):
        place_one_dc(cluster(), "us", ["u"], us_nodes, True)
    config, started = place_one_dc(cluster(), "us", ["u"], us_nodes, None)
    assert not placement.on_host(config, "10.1.0.1").scheduler and started == ["10.1.0.1"]


def test_one_dc_per_job_refuses_a_node_that_another_dc_uses():
    text = CLUSTER.replace('host = "10.1.0.1"', 'host = "10.1.0.1"\nworker_hosts = '
                                                '["10.0.0.7"]')
    import tomllib
    config = parse_cluster(tomllib.loads(text), "c.toml")
    with pytest.raises(SlurmError, match="DC us also has processes on 10.0.0.7, a node of "
                                         "DC eu's job"):
        place_one_dc(config, "eu", ["gw", "c7"], {"gw": "10.0.9.1", "c7": "10.0.0.7"}, None)


def test_dc_flags_in_slurm_mode_are_checked():
    het = Allocation("9", (("n1",), ("n2",)), heterogeneous=True)
    with pytest.raises(SlurmError, match="a heterogeneous job runs the whole cluster"):
        plan(cluster(), args(dc=["eu"], cluster="c.toml"), het, FakeScontrol(), fake_resolve)
    plain = Allocation("9", (("gw",),))
    with pytest.raises(SlurmError, match="one job runs one DC; give one --dc"):
        plan(cluster(), args(dc=["eu", "us"], cluster="c.toml"), plain, FakeScontrol(),
             fake_resolve)
    with pytest.raises(SlurmError, match="--slurm --dc needs --cluster FILE"):
        plan(cluster(), args(dc=["eu"]), plain, FakeScontrol(), fake_resolve)
    with pytest.raises(ClusterFileError, match="no DC named 'asia'|asia"):
        plan(cluster(), args(dc=["asia"], cluster="c.toml"), plain, FakeScontrol(),
             fake_resolve)
    config, shares, whole = plan(cluster(), args(dc=["eu"], cluster="c.toml"), plain,
                                 FakeScontrol(), fake_resolve)
    assert not whole and shares == [Share("gw", "10.0.9.1", None)]
    assert shares_of(config, ["10.0.9.1"], [[("gw", None)]], {"gw": "10.0.9.1"}) == shares


# --- the launcher's edge -------------------------------------------------------------------------

def test_launcher_outside_an_allocation_exits_2_naming_the_cause(capsys):
    code = run_in_allocation(cluster(), args(), environ={}, run=FakeScontrol())
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("launch: --slurm: not inside a Slurm allocation") and \
        "Traceback" not in err


def test_slurm_flag_excludes_ssh_host_and_wan(capsys):
    for extra in (["--cluster", "c.toml", "--ssh"], ["--dcs", "2", "--host", "10.0.0.1"],
                  ["--wan", "paper9"]):
        with pytest.raises(SystemExit) as exit_:
            cli.parse_args([*extra, "--slurm", "--", "true"])
        assert exit_.value.code == 2
        assert "--slurm excludes --wan, --ssh and --host" in capsys.readouterr().err
    assert cli.parse_args(["--cluster", "c.toml", "--slurm", "--dc", "eu", "--", "true"]).slurm


def test_without_slurm_the_live_test_skips_naming_the_packages_and_the_opt_in(monkeypatch):
    import slurm_cluster
    monkeypatch.setattr(slurm_cluster.shutil, "which", lambda _name: None)
    monkeypatch.setattr(slurm_cluster, "PROGRAMS", ("slurmd", "no-such-slurm-program"))
    reason = slurm_cluster.unavailable()
    assert "no-such-slurm-program not installed" in reason
    assert "slurm-wlm" in reason and "munge" in reason
    assert "NETSTORM_TEST_SYSTEM_PACKAGES=1" in reason
