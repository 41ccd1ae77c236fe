"""Kubernetes manifests of a netstorm cluster, made from its cluster file. Pure: documents
as dicts, no cluster is contacted and no file is read or written here.

What runs where (docs/launch.md, "Kubernetes"):

* the scheduler: a ``batch/v1`` Job (one pod, no retries) behind a headless Service;
* each DC: a JobSet (``jobset.x-k8s.io/v1alpha2``) with two replicated jobs, ``server``
  (one pod: ``python -m netstorm.geoserver --dc NAME``) and ``workers`` (an Indexed Job of
  the DC's ``workers`` pods, each running the training command through
  ``python -m netstorm.deploy.pod worker``, which gives it the launcher's environment);
  the server behind a headless Service;
* the cluster file the pods read (:func:`pod_cluster`) in a ConfigMap, mounted at
  ``/etc/netstorm/cluster.toml``; each principal's CURVE secret key in a Secret of its own,
  mounted only into its pods (a DC's key into its server and workers, the scheduler's into
  the scheduler).

The Services are headless (``clusterIP: None``) and publish pods that are not ready yet:
their DNS names resolve to the pods' own addresses, so every port a process binds is
reachable (a server's fixed ``server_port`` and the bulk channel's port it picks at start;
a worker's port, which the scheduler and its server dial back). Every process resolves the
names once, when it reads the cluster file; an init container waits until they resolve.
Each function is O(DCs + workers) at most.
"""
from __future__ import annotations

import base64
import re
from dataclasses import dataclass, replace

from netstorm.geoserver.config.cluster import ClusterConfig
from netstorm.geoserver.config.cluster_toml import to_toml
from netstorm.geoserver.config.hosts import SshConfig
from netstorm.geoserver.config.keys import SCHEDULER_PRINCIPAL, key_file_name

__all__ = ["CLUSTER_PATH", "DeployError", "KEYS_DIR", "Options", "manifests", "pod_cluster",
           "service_host"]

CONFIG_DIR = "/etc/netstorm"
CLUSTER_FILE = "cluster.toml"
CLUSTER_PATH = f"{CONFIG_DIR}/{CLUSTER_FILE}"
KEYS_DIR = "/etc/netstorm-keys"
TERMINATION_LOG = "/dev/termination-log"    # Kubernetes shows it as the pod's last words
WAIT_FOR_NAMES_S = 600      # how long a pod's init container waits for the Services' names
PORT_NAME = "netstorm"
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")       # RFC 1035: Services, Jobs
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")     # RFC 1123: namespaces
_MAX_LABEL = 63


class DeployError(ValueError):
    """The cluster file or an option cannot be deployed; the text names which and why."""


@dataclass(frozen=True)
class Options:
    """How to deploy: the container ``image`` (netstorm and the training script installed),
    the ``namespace``, ``name`` (every object's name starts with it: several runs may share a
    namespace), the image's ``python``, the workers' ``command``, MXNet's dist_sync names
    made netstorm's (``as_dist_sync``), the clusters' DNS ``domain`` (``cluster.local``;
    ``clusterset.local`` behind a multi-cluster Service) and ``pull_policy``."""

    image: str
    command: tuple
    namespace: str = "default"
    name: str = "netstorm"
    python: str = "python"
    as_dist_sync: bool = False
    domain: str = "cluster.local"
    pull_policy: str = "IfNotPresent"


def dns_label(text: str, what: str, pattern=_DNS_LABEL) -> str:
    """``text`` itself if it is a DNS label (Kubernetes names Services, Jobs and pods with
    such labels); DeployError naming ``what`` if not."""
    if not pattern.fullmatch(text) or len(text) > _MAX_LABEL:
        first = "a letter" if pattern is _DNS_LABEL else "a letter or digit"
        raise DeployError(f"{what} {text!r}: a Kubernetes name is at most {_MAX_LABEL} "
                          f"lower-case letters, digits and '-', starting with {first} and "
                          f"not ending with '-'")
    return text


def _dc_labels(config: ClusterConfig, opts: Options) -> dict:
    """DC name -> the label its objects are named with; two DCs may not share one."""
    labels = {}
    for dc in config.dcs:
        label = dc.name.lower().replace("_", "-")
        dns_label(_dc_object(opts, label), f"{config.source}: DC {dc.name!r} gives the name")
        clash = [name for name, other in labels.items() if other == label]
        if clash:
            raise DeployError(f"{config.source}: DCs {clash[0]!r} and {dc.name!r} would share "
                              f"the Kubernetes name {label!r} (names are lower case, '_' "
                              f"becomes '-'): rename one")
        labels[dc.name] = label
    return labels


def service_host(opts: Options, service: str) -> str:
    """The DNS name a Service of this deployment is reached at."""
    return f"{service}.{opts.namespace}.svc.{opts.domain}"


def _scheduler_service(opts: Options) -> str:
    return f"{opts.name}-scheduler"


def _dc_object(opts: Options, label: str) -> str:
    """The name of a DC's Service and JobSet."""
    return f"{opts.name}-dc-{label}"


def pod_cluster(config: ClusterConfig, opts: Options) -> ClusterConfig:
    """The cluster file the pods read: every process binds all interfaces and is reached at
    its Service's DNS name; workers are pods (no ``worker_hosts``); secret keys in
    :data:`KEYS_DIR`; no ``[ssh]``. DeployError for what a pod cannot have: a port chosen at
    start (a Service needs it fixed), paths on the launcher's host (``stats``,
    ``checkpoint``, ``resume``: they need a volume these manifests do not make), an emulated
    WAN."""
    where = config.source
    if config.scheduler_port == 0:
        raise DeployError(f"{where} [scheduler] port = 0: a Service needs a fixed port")
    ports = {config.scheduler_port: "the scheduler"}
    for dc in config.dcs:
        if dc.server_port == 0:
            raise DeployError(f"{where} DC {dc.name!r}: server_port = 0: a Service needs a "
                              f"fixed port")
        if dc.server_port in ports:
            raise DeployError(f"{where} DC {dc.name!r}: server_port = {dc.server_port} is "
                              f"{ports[dc.server_port]}'s too: in the pods every process "
                              f"binds 0.0.0.0, and a cluster file gives one address and port "
                              f"to one process only; give each its own port")
        ports[dc.server_port] = f"DC {dc.name!r}"
    for field, value in (("[scheduler] stats", config.stats),
                         ("[recovery] checkpoint", config.checkpoint),
                         ("[recovery] resume", config.resume)):
        if value:
            raise DeployError(f"{where} {field}: a path the pods would write or read needs a "
                              f"volume these manifests do not make; remove it here and add "
                              f"the volume and the path to the manifests by hand")
    if config.emulation.on:
        raise DeployError(f"{where} [emulation]: an emulated WAN's delays do not apply to "
                          f"pods; remove the table")
    labels = _dc_labels(config, opts)
    dcs = tuple(replace(dc, host="0.0.0.0", worker_hosts=(),
                        advertise=service_host(opts, _dc_object(opts, labels[dc.name])))
                for dc in config.dcs)
    security = config.security
    if security.curve:
        security = replace(security, secret_keys=KEYS_DIR)
    return replace(config, scheduler_host="0.0.0.0", dcs=dcs, ssh=SshConfig(),
                   scheduler_advertise=service_host(opts, _scheduler_service(opts)),
                   security=security)


def _meta(opts: Options, name: str, labels: dict) -> dict:
    return {"name": name, "namespace": opts.namespace, "labels": labels}


def _labels(opts: Options, role: str, dc_label: str = "") -> dict:
    labels = {"app.kubernetes.io/name": "netstorm", "app.kubernetes.io/instance": opts.name,
              "netstorm-role": role}
    if dc_label:
        labels["netstorm-dc"] = dc_label
    return labels


def _service(opts: Options, name: str, port: int, selector: dict) -> dict:
    """A headless Service whose name resolves to its pod's address, ready or not."""
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": _meta(opts, name, dict(selector)),
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                     "selector": selector,
                     "ports": [{"name": PORT_NAME, "port": port, "targetPort": port,
                                "protocol": "TCP"}]}}


def _container(opts: Options, name: str, command: list, port: int = 0) -> dict:
    container = {"name": name, "image": opts.image, "imagePullPolicy": opts.pull_policy,
                 "command": command,
                 "volumeMounts": [{"name": "cluster", "mountPath": CONFIG_DIR,
                                   "readOnly": True}],
                 "terminationMessagePolicy": "FallbackToLogsOnError"}
    if port:
        container["ports"] = [{"name": PORT_NAME, "containerPort": port, "protocol": "TCP"}]
    return container


def _pod(opts: Options, labels: dict, container: dict, names: list, key_secret: str) -> dict:
    """A pod template: ``container`` after an init container that waits until the Services'
    ``names`` resolve, the cluster file mounted, and the Secret ``key_secret`` ("": none)."""
    volumes = [{"name": "cluster", "configMap": {"name": f"{opts.name}-cluster"}}]
    if key_secret:
        volumes.append({"name": "keys", "secret": {"secretName": key_secret,
                                                   "defaultMode": 0o400}})
        container["volumeMounts"].append({"name": "keys", "mountPath": KEYS_DIR,
                                          "readOnly": True})
    wait = {"name": "wait-for-services", "image": opts.image,
            "imagePullPolicy": opts.pull_policy,
            "command": [opts.python, "-m", "netstorm.deploy.pod", "wait",
                        "--timeout", str(WAIT_FOR_NAMES_S), *names]}
    return {"metadata": {"labels": labels},
            "spec": {"restartPolicy": "Never", "initContainers": [wait],
                     "containers": [container], "volumes": volumes}}


def _key_secret(opts: Options, pod_config: ClusterConfig, principal: str, label: str) -> str:
    if not pod_config.security.curve:
        return ""
    return f"{opts.name}-scheduler-key" if principal == SCHEDULER_PRINCIPAL \
        else f"{opts.name}-dc-{label}-key"


def _job_spec(pod: dict, pods: int, indexed: bool) -> dict:
    """A Job's spec: ``pods`` pods at once, none retried (a failure fails the run, as under
    the launcher: netstorm's own ``[recovery]`` restarts processes, not Kubernetes)."""
    spec = {"completions": pods, "parallelism": pods, "backoffLimit": 0}
    if indexed:
        spec["completionMode"] = "Indexed"
    return {**spec, "template": pod}


def _escaped(argv) -> list:
    """The worker command as Kubernetes runs it: ``$(`` would expand a variable."""
    return [arg.replace("$(", "$$(") for arg in argv]


def manifests(config: ClusterConfig, opts: Options, secret_keys: dict | None) -> dict:
    """The deployment as ``{file name: [documents]}``: ``cluster.yaml`` (the ConfigMap),
    ``scheduler.yaml``, one ``dc-LABEL.yaml`` per DC and, given ``secret_keys`` (principal
    -> the text of its secret key file), ``secrets.yaml``. DeployError if the cluster file
    or the options cannot be deployed (:func:`pod_cluster`)."""
    dns_label(opts.name, "--name")
    dns_label(opts.namespace, "--namespace", _NAMESPACE)
    if not opts.command:
        raise DeployError("give the worker command after --, e.g. -- python train.py")
    pods = pod_cluster(config, opts)
    labels = _dc_labels(config, opts)
    names = [pods.scheduler_advertise] + [dc.advertise for dc in pods.dcs]
    files = {"cluster.yaml": [{
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": _meta(opts, f"{opts.name}-cluster", _labels(opts, "config")),
        "data": {CLUSTER_FILE: to_toml(pods, validate=False)}}]}
    py, cluster = opts.python, ["--cluster", CLUSTER_PATH]
    sched_labels = _labels(opts, "scheduler")
    sched = _container(opts, "scheduler", [py, "-m", "netstorm.scheduler", *cluster,
                                           "--reason-file", TERMINATION_LOG],
                       pods.scheduler_port)
    files["scheduler.yaml"] = [
        _service(opts, _scheduler_service(opts), pods.scheduler_port, sched_labels),
        {"apiVersion": "batch/v1", "kind": "Job",
         "metadata": _meta(opts, _scheduler_service(opts), sched_labels),
         "spec": _job_spec(_pod(opts, sched_labels, sched, names,
                                _key_secret(opts, pods, SCHEDULER_PRINCIPAL, "")), 1, False)}]
    for dc in pods.dcs:
        files[f"dc-{labels[dc.name]}.yaml"] = _dc_documents(opts, pods, dc, labels[dc.name],
                                                            names)
    if secret_keys is not None and pods.security.curve:
        files["secrets.yaml"] = [_secret(opts, pods, principal, labels, text)
                                 for principal, text in sorted(secret_keys.items())]
    return files


def _dc_documents(opts: Options, pods: ClusterConfig, dc, label: str, names: list) -> list:
    """A DC's server Service and its JobSet: the ``server`` and ``workers`` jobs."""
    name = _dc_object(opts, label)
    longest_pod = f"{name}-workers-0-{dc.workers - 1}-abcde"   # as the JobSet webhook checks
    if len(longest_pod) > _MAX_LABEL:
        raise DeployError(f"{pods.source} DC {dc.name!r}: the JobSet's pod names ("
                          f"{longest_pod}) would exceed {_MAX_LABEL} characters: shorten the "
                          f"DC's name or --name")
    py, cluster = opts.python, ["--cluster", CLUSTER_PATH]
    key = _key_secret(opts, pods, dc.name, label)
    server_labels = _labels(opts, "server", label)
    server = _container(opts, "server", [py, "-m", "netstorm.geoserver", *cluster, "--dc",
                                         dc.name, "--reason-file", TERMINATION_LOG],
                        dc.server_port)
    worker = _container(opts, "worker", [
        py, "-m", "netstorm.deploy.pod", "worker", *cluster, "--dc", dc.name,
        "--index", "$(NETSTORM_WORKER_INDEX)", "--host", "$(NETSTORM_POD_IP)",
        "--reason-file", TERMINATION_LOG, *(["--as-dist-sync"] if opts.as_dist_sync else []),
        "--", *_escaped(opts.command)])
    worker["env"] = [
        {"name": "NETSTORM_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "NETSTORM_WORKER_INDEX", "valueFrom": {"fieldRef": {
            "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}]
    jobs = [{"name": "server", "replicas": 1, "template": {"spec": _job_spec(
                _pod(opts, server_labels, server, names, key), 1, False)}},
            {"name": "workers", "replicas": 1, "template": {"spec": _job_spec(
                _pod(opts, _labels(opts, "worker", label), worker, names, key),
                dc.workers, True)}}]
    jobset = {"apiVersion": JOBSET_API, "kind": "JobSet",
              "metadata": _meta(opts, name, _labels(opts, "dc", label)),
              "spec": {"network": {"enableDNSHostnames": False},
                       "failurePolicy": {"maxRestarts": 0},
                       "successPolicy": {"operator": "All",
                                         "targetReplicatedJobs": ["workers"]},
                       "replicatedJobs": jobs}}
    return [_service(opts, name, dc.server_port, server_labels), jobset]


def _secret(opts: Options, pods: ClusterConfig, principal: str, labels: dict,
            text: str) -> dict:
    """The Secret holding ``principal``'s secret key file, as its pods mount it."""
    label = labels.get(principal, "")
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": _meta(opts, _key_secret(opts, pods, principal, label),
                              _labels(opts, "key", label)),
            "data": {key_file_name(principal):
                     base64.b64encode(text.encode("ascii")).decode("ascii")}}
