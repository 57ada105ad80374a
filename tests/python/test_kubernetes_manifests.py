"""examples/kubernetes/: every manifest parses and carries the fields that
doc/kubernetes.md relies on; the broker accepts the ConfigMap's
configuration; kubectl decodes the manifests.

kubectl runs offline only: `apply --dry-run=client` and `create
--dry-run=client` both ask an API server for its resource types even with
--validate=false, so the test uses `label --local` (every object decoded)
and `set env --local` (the DaemonSet decoded into its typed Go struct, which
catches a wrongly typed field)."""
import json
import os
import shutil
import subprocess

import pytest

import gstest
from gstest import start_service_broker

yaml = pytest.importorskip("yaml", reason="python3-yaml is not installed")

DIR = os.path.join(gstest.SRCDIR, "examples", "kubernetes")
MANIFESTS = ("broker-daemonset.yaml", "device-plugin-time-slicing.yaml")
SOCKET_DIR = "/run/gpushare"
ENDPOINT = "ipc:///run/gpushare/broker.sock"


def load(name):
    with open(os.path.join(DIR, name)) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def objects():
    return {(d["kind"], d["metadata"]["name"]): d for name in MANIFESTS for d in load(name)}


def daemonset():
    return objects()[("DaemonSet", "gpushare-broker")]


def test_every_yaml_file_parses():
    names = sorted(n for n in os.listdir(DIR) if n.endswith(".yaml"))
    assert names == sorted(MANIFESTS + ("config.yaml",))
    for name in MANIFESTS:
        for d in load(name):
            assert d["apiVersion"] and d["kind"] and d["metadata"]["name"], name


def test_daemonset_shares_the_socket_directory_and_sees_host_pids():
    ds = daemonset()
    spec = ds["spec"]["template"]["spec"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= \
        ds["spec"]["template"]["metadata"]["labels"].items()
    assert spec["hostPID"] is True  # peer-credential pids of other pods' processes
    assert spec["terminationGracePeriodSeconds"] >= 60  # unparking before exit
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in \
        spec["tolerations"]
    (c,) = spec["containers"]
    assert c["command"][:2] == ["/usr/local/bin/gpushare-broker", "--system"]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    # A device-plugin replica would be one GPU's, and one fewer for notebooks.
    assert "nvidia.com/gpu" not in str(c.get("resources", {}))
    assert {"SYS_PTRACE", "KILL"} <= set(c["securityContext"]["capabilities"]["add"])
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in spec["volumes"]}
    run = [n for n, m in mounts.items() if m["mountPath"] == SOCKET_DIR]
    assert run and not mounts[run[0]].get("readOnly")
    # The directory, not the socket file: a restarted broker's socket is new.
    assert vols[run[0]]["hostPath"] == {"path": SOCKET_DIR, "type": "DirectoryOrCreate"}
    conf = [m for m in mounts.values() if m["mountPath"] == "/etc/gpushare"]
    assert conf and c["command"][2:] == ["--config", "/etc/gpushare/broker.conf"]
    cm = objects()[("ConfigMap", vols[conf[0]["name"]]["configMap"]["name"])]
    assert cm["metadata"]["namespace"] == ds["metadata"]["namespace"]
    assert "broker.conf" in cm["data"]
    assert "socket_group" not in cm["data"]["broker.conf"]  # pods' gids are not the node's
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["exec"]["command"][0] == "/usr/local/bin/gpushare"


def test_the_broker_accepts_the_configmap(tmp_path, sim, short_tmp):
    conf = tmp_path / "broker.conf"
    conf.write_text(objects()[("ConfigMap", "gpushare-broker")]["data"]["broker.conf"])
    argv = [gstest.BROKER] + daemonset()["spec"]["template"]["spec"]["containers"][0][
        "command"][1:2]
    b = start_service_broker(argv, conf, short_tmp / "gpushare", sim)
    try:
        st = os.stat(short_tmp / "gpushare" / "broker.sock")
        assert st.st_mode & 0o777 == 0o666  # no socket_group: everyone who mounts it
        assert b.status()["policy"] == "adaptive"
    finally:
        assert b.stop() == 0


def test_time_slicing_config():
    cm = objects()[("ConfigMap", "nvidia-device-plugin-time-slicing")]
    (text,) = cm["data"].values()
    cfg = yaml.safe_load(text)
    assert cfg["version"] == "v1"
    ts = cfg["sharing"]["timeSlicing"]
    assert ts["renameByDefault"] is False  # config.yaml asks for nvidia.com/gpu itself
    (res,) = ts["resources"]
    assert res["name"] == "nvidia.com/gpu" and res["replicas"] >= 2


def test_jupyterhub_values_mount_the_socket_and_offer_a_shared_gpu_profile():
    (values,) = load("config.yaml")
    su = values["singleuser"]
    assert su["extraEnv"]["GPUSHARE_BROKER"] == ENDPOINT
    vols = {v["name"]: v for v in su["storage"]["extraVolumes"]}
    (mount,) = [m for m in su["storage"]["extraVolumeMounts"] if m["mountPath"] == SOCKET_DIR]
    assert mount["readOnly"] is True  # connecting needs no write access to the mount
    assert vols[mount["name"]]["hostPath"]["path"] == SOCKET_DIR
    gpu = [p for p in su["profileList"]
           if "nvidia.com/gpu" in p.get("kubespawner_override", {}).get(
               "extra_resource_limits", {})]
    assert len(gpu) == 1
    assert gpu[0]["kubespawner_override"]["extra_resource_limits"]["nvidia.com/gpu"] == "1"
    # The broker's socket is where the pods look for it.
    ds_mounts = daemonset()["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert SOCKET_DIR in [m["mountPath"] for m in ds_mounts]


def test_dockerfile_builds_both_images_with_the_kernelspec_and_hook():
    text = open(os.path.join(DIR, "Dockerfile")).read()
    stages = [ln.split()[-1] for ln in text.splitlines() if ln.startswith("FROM ")]
    assert stages == ["cuda", "build", "broker", "singleuser"]
    assert "--with-python=/opt/conda/bin/python" in text  # docker-stacks' python has ipykernel
    assert "make install DESTDIR=/staging" in text
    assert "COPY --from=build /staging/usr/local/ /usr/local/" in text
    assert "ENV GPUSHARE_BROKER=" + ENDPOINT in text
    assert text.rstrip().endswith("USER ${NB_UID}")
    # The build context is the repository root; its ignore file keeps the sources.
    ignore = open(os.path.join(DIR, "Dockerfile.dockerignore")).read().split()
    assert "/configure" in ignore and "**/Makefile" in ignore
    for kept in ("configure.ac", "Makefile.am", "libhook", "launcher", "broker", "cli", "common"):
        assert kept not in ignore and "/" + kept not in ignore


KUBECTL = shutil.which("kubectl")


def kubectl(tmp_path, *args):
    env = dict(os.environ, HOME=str(tmp_path))  # no kubeconfig, no cache: nothing of the user's
    env.pop("KUBECONFIG", None)
    return subprocess.run([KUBECTL] + list(args), capture_output=True, text=True, timeout=120,
                          env=env)


@pytest.mark.skipif(not KUBECTL, reason="kubectl is not installed (Debian package "
                    "kubernetes-client; build-aux/install-deps.sh installs it)")
@pytest.mark.parametrize("name", MANIFESTS)
def test_kubectl_decodes_every_object(tmp_path, name):
    r = kubectl(tmp_path, "label", "--local", "-f", os.path.join(DIR, name), "-o", "json",
                "gpushare.check=1")
    assert r.returncode == 0, r.stderr
    # One JSON document per object, or one List (kubectl versions differ).
    items, text, dec = [], r.stdout.strip(), json.JSONDecoder()
    while text:
        doc, end = dec.raw_decode(text)
        items += doc["items"] if doc.get("kind") == "List" else [doc]
        text = text[end:].strip()
    assert [(i["kind"], i["metadata"]["name"]) for i in items] == \
        [(d["kind"], d["metadata"]["name"]) for d in load(name)]


@pytest.mark.skipif(not KUBECTL, reason="kubectl is not installed (Debian package "
                    "kubernetes-client; build-aux/install-deps.sh installs it)")
def test_kubectl_decodes_the_daemonset_into_its_type(tmp_path):
    only = tmp_path / "ds.yaml"
    only.write_text(yaml.safe_dump(daemonset()))
    r = kubectl(tmp_path, "set", "env", "--local", "-f", str(only), "-o", "json", "CHECK=1")
    assert r.returncode == 0 and "error" not in r.stderr.lower(), r.stderr
    spec = json.loads(r.stdout)["spec"]["template"]["spec"]
    assert spec["hostPID"] is True
    # A wrongly typed field is refused, so the decode above means something.
    bad = daemonset()
    bad["spec"]["template"]["spec"]["hostPID"] = "yes"
    only.write_text(yaml.safe_dump(bad))
    r = kubectl(tmp_path, "set", "env", "--local", "-f", str(only), "-o", "json", "CHECK=1")
    assert r.returncode != 0 or "error" in r.stderr.lower()
