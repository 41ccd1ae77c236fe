"""Every manifest ``netstorm-deploy kubernetes`` writes passes the resources' schemas,
offline: Kubernetes v1.33's Service, ConfigMap, Secret and batch/v1 Job, and the JobSet CRD's
v1alpha2 schema, vendored in tests/third_party/k8s/ (its README says from where). The
committed 3-DC example is checked as it is, and again with its Secrets (keys made here);
broken manifests are refused, so the check can fail."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml
from referencing import Registry, Resource

from netstorm.deploy import cli
from netstorm.launcher.keygen import keygen

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "tests" / "third_party" / "k8s"
EXAMPLE = ROOT / "deploy" / "kubernetes-3dc.toml"
EXAMPLE_OUT = ROOT / "deploy" / "kubernetes"
OBJECT_META = "https://kubernetes.io/api/_definitions.json#/$defs/" \
              "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
CORE = {("v1", "Service"): "service-v1", ("v1", "ConfigMap"): "configmap-v1",
        ("v1", "Secret"): "secret-v1", ("batch/v1", "Job"): "job-batch-v1"}
JOBSET = ("jobset.x-k8s.io/v1alpha2", "JobSet")


def _closed(node, top: bool = True):
    """The CRD schema as the API server's strict field validation applies it: an object
    listing its properties takes no others (unless it preserves unknown fields), and the
    object's own ``metadata`` is an ObjectMeta."""
    if isinstance(node, list):
        return [_closed(v, False) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _closed(v, False) for k, v in node.items()}
    if "properties" in out and "additionalProperties" not in out and \
            not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    if top:
        out["properties"]["metadata"] = {"$ref": OBJECT_META}
    return out


@pytest.fixture(scope="module")
def validators():
    """(apiVersion, kind) -> a validator; every ``$ref`` resolves in the vendored files (the
    registry has no retriever: a reference it lacks raises, nothing is fetched)."""
    resources, by_name = [], {}
    for path in sorted((K8S / "core").glob("*.json")):
        contents = json.loads(path.read_text())
        resources.append((contents["$id"], Resource.from_contents(contents)))
        by_name[path.stem] = contents
    registry = Registry().with_resources(resources)
    found = {key: jsonschema.Draft202012Validator(by_name[name], registry=registry)
             for key, name in CORE.items()}
    jobset = _closed(json.loads((K8S / "jobset-v1alpha2.json").read_text()))
    found[JOBSET] = jsonschema.Draft202012Validator(jobset, registry=registry)
    return found


def problems(validators, document: dict) -> list:
    """Every schema error of ``document``, as text (kind unknown to the test: one error)."""
    key = (document.get("apiVersion"), document.get("kind"))
    if key not in validators:
        return [f"no schema for {key}"]
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validators[key].iter_errors(document)]


def documents(folder: Path) -> list:
    """(file name, document) of every manifest in ``folder``."""
    return [(path.name, doc) for path in sorted(folder.glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def test_the_committed_example_passes_the_schemas(validators):
    docs = documents(EXAMPLE_OUT)
    kinds = sorted({doc["kind"] for _, doc in docs})
    assert kinds == ["ConfigMap", "Job", "JobSet", "Service"]
    assert sum(doc["kind"] == "JobSet" for _, doc in docs) == 3
    for name, doc in docs:
        assert problems(validators, doc) == [], (name, doc["kind"], doc["metadata"]["name"])


@pytest.fixture(scope="module")
def with_secrets(tmp_path_factory) -> Path:
    """The example made again with keys of its own and its Secrets written."""
    folder = tmp_path_factory.mktemp("deploy")
    text = EXAMPLE.read_text()
    cluster = folder / "cluster.toml"
    cluster.write_text(text[:text.index("# CURVE keys")])
    keygen(cluster)
    assert cli.main(["kubernetes", "--cluster", str(cluster), "--image", "registry/x:1",
                     "-o", str(folder / "out"), "--", "python", "train.py"]) == 0
    return folder / "out"


def test_every_document_with_its_secrets_passes_the_schemas(validators, with_secrets):
    docs = documents(with_secrets)
    assert sum(doc["kind"] == "Secret" for _, doc in docs) == 4     # scheduler + 3 DCs
    for name, doc in docs:
        assert problems(validators, doc) == [], (name, doc["kind"], doc["metadata"]["name"])


def _find(docs, kind):
    return copy.deepcopy(next(doc for _, doc in docs if doc["kind"] == kind))


def _pod_spec(jobset):
    return jobset["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]


BROKEN = {
    "a misspelt JobSet field": ("JobSet", lambda d: d["spec"].__setitem__(
        "replicatedJob", d["spec"].pop("replicatedJobs"))),
    "JobSet replicas as text": ("JobSet", lambda d: d["spec"]["replicatedJobs"][0].__setitem__(
        "replicas", "1")),
    "a worker container without a name": ("JobSet", lambda d: _pod_spec(d)["containers"][0]
                                          .pop("name")),
    "an unknown field in a worker container": ("JobSet", lambda d: _pod_spec(d)["containers"][0]
                                               .__setitem__("cmd", ["python"])),
    "a Service port as text": ("Service", lambda d: d["spec"]["ports"][0].__setitem__(
        "port", "9000")),
    "a Service without ports' list": ("Service", lambda d: d["spec"].__setitem__("ports", {})),
    "a Job's pod image as a number": ("Job", lambda d: d["spec"]["template"]["spec"][
        "containers"][0].__setitem__("image", 7)),
    "a Job's restart policy misspelt": ("Job", lambda d: d["spec"]["template"]["spec"]
                                        .__setitem__("restartPolicies", "Never")),
    "ConfigMap data not text": ("ConfigMap", lambda d: d["data"].__setitem__("n", 1)),
    "metadata labels not text": ("ConfigMap", lambda d: d["metadata"]["labels"].__setitem__(
        "n", 1)),
    "JobSet metadata misspelt": ("JobSet", lambda d: d["metadata"].__setitem__("label", {})),
    "a Secret's data as a list": ("Secret", lambda d: d.__setitem__("data", ["x"])),
    "a wrong apiVersion": ("JobSet", lambda d: d.__setitem__("apiVersion", "jobset/v1")),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_manifest_is_refused(validators, with_secrets, case):
    kind, damage = BROKEN[case]
    doc = _find(documents(with_secrets), kind)
    assert problems(validators, doc) == []
    damage(doc)
    assert problems(validators, doc), case


def test_refs_resolve_offline_only():
    """Every $ref of the vendored core schemas names a definition vendored beside them."""
    defs = json.loads((K8S / "core" / "_definitions.json").read_text())["$defs"]
    text = "".join(p.read_text() for p in (K8S / "core").glob("*.json"))
    refs = set(re.findall(r'"\$ref": "([^"]+)"', text))
    assert refs
    for ref in refs:
        assert ref.split("/$defs/")[1] in defs, ref
        assert ref.startswith(("#/$defs/", "/api/_definitions.json#/$defs/")), ref
