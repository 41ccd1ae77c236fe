"""netstorm-deploy kubernetes: what the manifests say (names, ports, commands, where the
keys go), the committed example regenerates byte for byte, and bad input fails with a line
naming the file and field or the flag (exit 2, no traceback, nothing written)."""
from __future__ import annotations

import base64
import importlib.util
import os
import shutil
import stat
import tomllib
from pathlib import Path

import pytest
import yaml

from netstorm.deploy import cli, pod
from netstorm.deploy.kubernetes import DeployError, Options, manifests, pod_cluster
from netstorm.geoserver.config.cluster import parse_cluster
from netstorm.launcher.keygen import keygen

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "kubernetes-3dc.toml"
# the command docs/launch.md and deploy/kubernetes-3dc.toml give for deploy/kubernetes/
EXAMPLE_ARGV = ["kubernetes", "--cluster", "deploy/kubernetes-3dc.toml", "--image",
                "registry.example/netstorm-train:0.1", "--namespace", "netstorm",
                "--no-secrets", "-o", "deploy/kubernetes", "--", "python",
                "examples/train_gluon.py"]

BASE = """
[scheduler]
host = "127.0.0.1"
port = 9000
[[dc]]
name = "eu"
host = "127.0.0.1"
server_port = 9100
workers = 2
[[dc]]
name = "us_east"
host = "127.0.0.2"
server_port = 9101
workers = 3
"""


def config(text: str = BASE, curve: bool = False):
    data = tomllib.loads(text + ("" if curve else "[security]\ncurve = false\n"))
    return parse_cluster(data, "c.toml")


def opts(**kw) -> Options:
    return Options(**{"image": "reg/img:1", "command": ("python", "t.py"),
                      "namespace": "ml", **kw})


def by_kind(files: dict, kind: str) -> list:
    return [doc for docs in files.values() for doc in docs if doc["kind"] == kind]


def test_the_committed_example_regenerates_byte_for_byte(tmp_path, monkeypatch):
    (tmp_path / "deploy").mkdir()
    shutil.copy(EXAMPLE, tmp_path / "deploy" / EXAMPLE.name)
    monkeypatch.chdir(tmp_path)
    assert cli.main(EXAMPLE_ARGV) == 0
    made = {p.name: p.read_text() for p in (tmp_path / "deploy" / "kubernetes").iterdir()}
    committed = {p.name: p.read_text() for p in (ROOT / "deploy" / "kubernetes").iterdir()}
    assert sorted(made) == sorted(committed) == ["cluster.yaml", "dc-asia.yaml",
                                                 "dc-eu.yaml", "dc-us.yaml", "scheduler.yaml"]
    for name in made:
        assert made[name] == committed[name], \
            f"deploy/kubernetes/{name} is stale: run netstorm-deploy {' '.join(EXAMPLE_ARGV)}"


def test_the_pods_cluster_file_names_services_and_reads_back():
    pods = pod_cluster(config(), opts())
    assert pods.scheduler_host == "0.0.0.0"
    assert pods.scheduler_advertise == "netstorm-scheduler.ml.svc.cluster.local"
    assert [(d.host, d.advertise, d.server_port) for d in pods.dcs] == [
        ("0.0.0.0", "netstorm-dc-eu.ml.svc.cluster.local", 9100),
        ("0.0.0.0", "netstorm-dc-us-east.ml.svc.cluster.local", 9101)]
    files = manifests(config(), opts(domain="clusterset.local"), None)
    text = by_kind(files, "ConfigMap")[0]["data"]["cluster.toml"]
    data = tomllib.loads(text)
    assert data["dc"][1]["advertise"] == "netstorm-dc-us-east.ml.svc.clusterset.local"
    assert data["dc"][1]["name"] == "us_east"        # the DC keeps its name
    assert "worker_hosts" not in text and "[ssh]" not in text


def test_one_jobset_per_dc_with_a_server_and_indexed_workers():
    files = manifests(config(), opts(), None)
    assert sorted(files) == ["cluster.yaml", "dc-eu.yaml", "dc-us-east.yaml", "scheduler.yaml"]
    jobsets = by_kind(files, "JobSet")
    assert [j["metadata"]["name"] for j in jobsets] == ["netstorm-dc-eu", "netstorm-dc-us-east"]
    server, workers = jobsets[1]["spec"]["replicatedJobs"]
    assert (server["name"], workers["name"]) == ("server", "workers")
    assert workers["template"]["spec"]["completions"] == 3
    assert workers["template"]["spec"]["completionMode"] == "Indexed"
    command = server["template"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[1:] == ["-m", "netstorm.geoserver", "--cluster", "/etc/netstorm/cluster.toml",
                           "--dc", "us_east", "--reason-file", "/dev/termination-log"]
    worker = workers["template"]["spec"]["template"]["spec"]["containers"][0]
    assert worker["command"][-3:] == ["--", "python", "t.py"]
    assert "$(NETSTORM_WORKER_INDEX)" in worker["command"]
    assert {e["name"] for e in worker["env"]} == {"NETSTORM_POD_IP", "NETSTORM_WORKER_INDEX"}
    services = {s["metadata"]["name"]: s for s in by_kind(files, "Service")}
    assert services["netstorm-dc-us-east"]["spec"]["ports"][0]["port"] == 9101
    assert services["netstorm-scheduler"]["spec"]["ports"][0]["port"] == 9000
    assert all(s["spec"]["clusterIP"] == "None" for s in services.values())
    selector = services["netstorm-dc-us-east"]["spec"]["selector"]
    labels = server["template"]["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= labels.items()
    worker_labels = workers["template"]["spec"]["template"]["metadata"]["labels"]
    assert not selector.items() <= worker_labels.items()    # the Service is the server's
    assert by_kind(files, "Job")[0]["spec"]["backoffLimit"] == 0


def test_a_worker_command_is_not_expanded_by_kubernetes():
    files = manifests(config(), opts(command=("python", "t.py", "--x=$(HOME)")), None)
    worker = by_kind(files, "JobSet")[0]["spec"]["replicatedJobs"][1]
    assert worker["template"]["spec"]["template"]["spec"]["containers"][0]["command"][-1] == \
        "--x=$$(HOME)"


def test_secret_keys_go_only_into_secrets_each_mounted_only_by_its_own_pods(tmp_path):
    cluster = tmp_path / "c.toml"
    cluster.write_text(BASE)
    keygen(cluster)
    out = tmp_path / "out"
    assert cli.main(["kubernetes", "--cluster", str(cluster), "--image", "i", "-o", str(out),
                     "--", "python", "t.py"]) == 0
    assert stat.S_IMODE(os.stat(out / "secrets.yaml").st_mode) == 0o600
    secrets = list(yaml.safe_load_all((out / "secrets.yaml").read_text()))
    assert {s["metadata"]["name"] for s in secrets} == {
        "netstorm-scheduler-key", "netstorm-dc-eu-key", "netstorm-dc-us-east-key"}
    for secret in secrets:
        (name, data), = secret["data"].items()
        assert base64.b64decode(data) == (tmp_path / "c-keys" / name).read_bytes()
    public = (out / "cluster.yaml").read_text()
    assert "secret-key" not in public and "key_secret" not in public
    for path in out.glob("*.yaml"):
        if path.name != "secrets.yaml":
            assert "secret-key" not in path.read_text()
    dc_eu = list(yaml.safe_load_all((out / "dc-eu.yaml").read_text()))[1]
    for job in dc_eu["spec"]["replicatedJobs"]:
        volumes = job["template"]["spec"]["template"]["spec"]["volumes"]
        assert [v["secret"]["secretName"] for v in volumes if "secret" in v] == \
            ["netstorm-dc-eu-key"]
    scheduler = list(yaml.safe_load_all((out / "scheduler.yaml").read_text()))[1]
    assert [v["secret"]["secretName"] for v in scheduler["spec"]["template"]["spec"]["volumes"]
            if "secret" in v] == ["netstorm-scheduler-key"]


def test_files_it_wrote_before_are_replaced_and_others_kept(tmp_path):
    cluster = tmp_path / "c.toml"
    cluster.write_text(BASE + "[security]\ncurve = false\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "dc-old.yaml").write_text(f"# {cli.GENERATED} from x\n---\n")
    (out / "mine.yaml").write_text("kind: Namespace\n")
    assert cli.main(["kubernetes", "--cluster", str(cluster), "--image", "i", "-o", str(out),
                     "--", "python", "t.py"]) == 0
    assert not (out / "dc-old.yaml").exists() and (out / "mine.yaml").exists()
    assert not (out / "secrets.yaml").exists()        # curve = false: no keys at all


def _dc(name, port, workers=1):
    return f'[[dc]]\nname = "{name}"\nhost = "127.0.0.1"\nserver_port = {port}\n' \
           f'workers = {workers}\n'


SCHED = '[scheduler]\nhost = "127.0.0.1"\nport = 9000\n'
CURVE_OFF = "[security]\ncurve = false\n"
REFUSED = {     # cluster file -> what the error line names
    "a port chosen at start": (SCHED + '[[dc]]\nname = "eu"\nhost = "127.0.0.2"\n'
                               'server_port = 0\nworkers = 1\n' + CURVE_OFF, "server_port = 0"),
    "a shared port": (SCHED + _dc("eu", 9100) + '[[dc]]\nname = "us"\nhost = "127.0.0.2"\n'
                      'server_port = 9100\nworkers = 1\n' + CURVE_OFF, "server_port = 9100"),
    "names clashing in DNS": (SCHED + _dc("eu_1", 9100) + _dc("eu-1", 9101) + CURVE_OFF,
                              "'eu_1' and 'eu-1'"),
    "a name DNS cannot hold": (SCHED + _dc("eu-", 9100) + CURVE_OFF, "DC 'eu-'"),
    "too many workers for pod names": (SCHED + _dc("a" * 40, 9100, 100) + CURVE_OFF,
                                       "exceed 63"),
    "a stats path": (SCHED.replace("9000\n", '9000\nstats = "s.jsonl"\n') + _dc("eu", 9100)
                     + CURVE_OFF, "[scheduler] stats"),
    "no keys": (SCHED + _dc("eu", 9100), "netstorm-keygen"),
    "a broken file": (SCHED + "[[dc]]\nname = 3\n", "'name'"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_cluster_file_it_cannot_deploy_is_refused_naming_the_field(tmp_path, capsys, case):
    text, named = REFUSED[case]
    cluster = tmp_path / "c.toml"
    cluster.write_text(text)
    out = tmp_path / "out"
    assert cli.main(["kubernetes", "--cluster", str(cluster), "--image", "i", "-o", str(out),
                     "--", "python", "t.py"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("deploy: ") and named in err and "Traceback" not in err
    assert str(cluster) in err
    assert not out.exists()
    assert cluster.read_text() == text


FLAGS = {
    "--namespace": (["--namespace", "Bad_NS"], "--namespace 'Bad_NS'"),
    "--name": (["--name", "9x"], "--name '9x'"),
    "--image": (["--image", "a b"], "--image"),
    "command": ([], "worker command"),
}


@pytest.mark.parametrize("flag", sorted(FLAGS))
def test_a_bad_flag_is_refused_naming_it(tmp_path, capsys, flag):
    extra, named = FLAGS[flag]
    cluster = tmp_path / "c.toml"
    cluster.write_text(BASE + CURVE_OFF)
    argv = ["kubernetes", "--cluster", str(cluster), "--image", "i", "-o", str(tmp_path / "o"),
            *extra] + ([] if flag == "command" else ["--", "python", "t.py"])
    try:
        code = cli.main(argv)
    except SystemExit as stop:      # argparse's own refusals
        code = stop.code
    assert code == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_keys_that_do_not_match_the_file_are_refused(tmp_path, capsys):
    cluster = tmp_path / "c.toml"
    cluster.write_text(BASE)
    keygen(cluster)
    other = tmp_path / "other.toml"
    other.write_text(BASE)
    keygen(other)
    (tmp_path / "c-keys" / "dc-eu.key_secret").unlink()
    shutil.copy(tmp_path / "other-keys" / "dc-eu.key_secret", tmp_path / "c-keys")
    assert cli.main(["kubernetes", "--cluster", str(cluster), "--image", "i", "-o",
                     str(tmp_path / "o"), "--", "python", "t.py"]) == 2
    err = capsys.readouterr().err
    assert "dc-eu.key_secret" in err and "not the one" in err
    assert cli.main(["kubernetes", "--cluster", str(cluster), "--image", "i", "-o",
                     str(tmp_path / "o"), "--no-secrets", "--", "python", "t.py"]) == 0


def test_manifests_refuse_an_empty_command():
    with pytest.raises(DeployError, match="worker command"):
        manifests(config(), opts(command=()), None)


def _containers(files: dict):
    for docs in files.values():
        for doc in docs:
            if doc["kind"] == "Job":
                yield doc["spec"]["template"]["spec"]
            elif doc["kind"] == "JobSet":
                for job in doc["spec"]["replicatedJobs"]:
                    yield job["template"]["spec"]["template"]["spec"]


def test_every_pod_runs_a_module_that_exists_with_flags_it_takes():
    """The commands name real modules (``-m``) and only flags those modules declare; the
    worker's command parses as the pod runner reads it, its variables filled in."""
    files = manifests(config(), opts(as_dist_sync=True), None)
    seen = set()
    for spec in _containers(files):
        for container in spec["initContainers"] + spec["containers"]:
            command = container["command"]
            module = command[command.index("-m") + 1]
            found = importlib.util.find_spec(module)
            assert found is not None, module
            source = Path(found.origin if found.submodule_search_locations is None
                          else Path(found.origin).parent / "__main__.py").read_text()
            own = command[command.index("-m") + 2:]
            own = own[:own.index("--")] if "--" in own else own
            for flag in (a for a in own if a.startswith("--")):
                assert f'"{flag}"' in source, (module, flag)
            if module == "netstorm.deploy.pod" and own[0] == "worker":
                args = pod.parse_args([a.replace("$(NETSTORM_WORKER_INDEX)", "1").replace(
                    "$(NETSTORM_POD_IP)", "10.0.0.9") for a in command[3:]])
                assert (args.index, args.host, args.as_dist_sync) == (1, "10.0.0.9", True)
                assert args.command == ["python", "t.py"]
            seen.add(module)
    assert seen == {"netstorm.scheduler", "netstorm.geoserver", "netstorm.deploy.pod"}
