"""Remake the vendored schemas of this folder (README.md says from what). Run by hand:

    python tests/third_party/k8s/refresh.py KUBERNETES_VALIDATE_SCHEMA_DIR JOBSET_CRD_YAML

KUBERNETES_VALIDATE_SCHEMA_DIR: ``kubernetes_validate/kubernetes-json-schema/v1.33.0-local-strict``
of the kubernetes-validate wheel; JOBSET_CRD_YAML: kubernetes-sigs/jobset's
``config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml``. Keeps the four core schemas
the manifests use and only the definitions they reach; drops every ``description`` text
(nothing validates it); writes the JobSet CRD's v1alpha2 ``openAPIV3Schema`` as JSON.
Needs PyYAML. Not a test: tests/ does not collect third_party/.
"""
import json
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
CORE = ("configmap-v1", "secret-v1", "service-v1", "job-batch-v1")
PREFIXES = ("/api/_definitions.json#/$defs/", "#/$defs/")   # from a schema, within the defs


def strip(node):
    """``node`` without string-valued ``description`` keys (a property named description
    is a schema, a dict, and stays)."""
    if isinstance(node, dict):
        return {k: strip(v) for k, v in node.items()
                if not (k == "description" and isinstance(v, str))}
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node


def refs(node, found):
    if isinstance(node, dict):
        ref = node.get("$ref")
        for prefix in PREFIXES:
            if isinstance(ref, str) and ref.startswith(prefix):
                found.add(ref[len(prefix):])
        for value in node.values():
            refs(value, found)
    elif isinstance(node, list):
        for value in node:
            refs(value, found)


def main(schema_dir, crd_yaml):
    source = Path(schema_dir)
    out = HERE / "core"
    out.mkdir(exist_ok=True)
    definitions = json.loads((source / "_definitions.json").read_text())
    wanted, todo = set(), set()
    for name in CORE:
        schema = json.loads((source / f"{name}.json").read_text())
        refs(schema, todo)
        (out / f"{name}.json").write_text(json.dumps(strip(schema), indent=1,
                                                     sort_keys=True) + "\n")
    while todo:
        name = todo.pop()
        if name not in wanted:
            wanted.add(name)
            refs(definitions["$defs"][name], todo)
    kept = {**definitions, "$defs": {k: definitions["$defs"][k] for k in sorted(wanted)}}
    (out / "_definitions.json").write_text(json.dumps(strip(kept), indent=1,
                                                      sort_keys=True) + "\n")
    crd = yaml.safe_load(Path(crd_yaml).read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2")
    (HERE / "jobset-v1alpha2.json").write_text(json.dumps(
        strip(version["schema"]["openAPIV3Schema"]), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
