"""The system service as `make install` writes it (broker/gpushare-broker.service):
it has what the design relies on and none of the sandboxing that would cut
the broker off from the GPU or other users' processes, systemd's own parser
accepts it, and its ExecStart serves with the example configuration.
test_debian_package.py runs the same checks on the packaged unit."""
import grp
import json
import os
import re
import shlex
import shutil
import socket
import subprocess

import pytest

import gstest

UNIT = os.path.join(gstest.BUILDDIR, "broker", "gpushare-broker.service")
EXAMPLE_CONF = os.path.join(gstest.SRCDIR, "broker", "broker.conf.example")

# Each of these would break the broker: /dev/nvidia* (devices; ProtectClock
# implies a DeviceAllow= list), other users' /proc/PID, uids and ptrace-like
# rights over their processes (parking), nvidia-modprobe, TCP metrics.
FORBIDDEN = ("PrivateDevices", "DevicePolicy", "DeviceAllow", "ProtectClock", "ProtectProc",
             "ProcSubset", "PrivateUsers", "User", "DynamicUser", "CapabilityBoundingSet",
             "AmbientCapabilities", "ProtectKernelModules", "PrivateNetwork",
             "RestrictAddressFamilies", "SystemCallFilter", "MemoryDenyWriteExecute")


def read_unit(path):
    """{section: {key: [values]}} of a systemd unit file."""
    unit, section = {}, None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("["):
                section = unit.setdefault(line.strip("[]"), {})
            else:
                key, value = line.split("=", 1)
                section.setdefault(key.strip(), []).append(value.strip())
    return unit


def check_unit(path, bindir):
    """Assert what the service relies on; returns the ExecStart argv."""
    unit = read_unit(path)
    svc = unit["Service"]
    one = {k: v[-1] for k, v in svc.items()}
    assert one["Type"] == "notify"  # the broker sends READY=1
    assert one["RuntimeDirectory"] == "gpushare"  # /run/gpushare, the --system socket's directory
    for key in ("NoNewPrivileges", "ProtectHome", "PrivateTmp"):
        assert one[key] == "yes", key
    assert one["ProtectSystem"] == "strict"
    assert one["LogsDirectory"] == "gpushare"  # event_log's writable place
    assert "kill -HUP $MAINPID" in one["ExecReload"]
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]
    for key in FORBIDDEN:
        assert key not in svc, "%s would cut the broker off" % key
    argv = shlex.split(one["ExecStart"])
    assert argv == [bindir + "/gpushare-broker", "--system"]
    return argv


def systemd_verify(path, tmp_path, exec_start):
    """systemd-analyze verify on a copy whose ExecStart is exec_start (the
    installed path need not exist here); returns its complaints."""
    copy = tmp_path / "gpushare-broker.service"
    text = re.sub(r"(?m)^ExecStart=\S+", "ExecStart=" + exec_start, open(path).read())
    copy.write_text(text)
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", str(copy)], capture_output=True,
                       text=True, timeout=120)
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    if not os.access("/bin/kill", os.X_OK):  # procps is the package's dependency, maybe not here
        lines = [ln for ln in lines if "/bin/kill" not in ln]
    return r.returncode, lines


def service_conf(tmp_path, example, uncomment=False):
    """The example configuration with this user's group as socket_group (the
    service's group need not exist here); uncomment=True also turns on every
    commented key, with places and ports of this test."""
    group = grp.getgrgid(os.getgid()).gr_name
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = []
    for line in open(example):
        m = re.match(r"^#?(\w+) = (.*)$", line.strip())
        if m and (uncomment or not line.startswith("#")):
            key, value = m.groups()
            value = {"socket_group": group, "admin_group": group,
                     "event_log": str(tmp_path / "events.jsonl"),
                     "metrics_port": str(port)}.get(key, value)
            line = "%s = %s\n" % (key, value)
        out.append(line)
    conf = tmp_path / "broker.conf"
    conf.write_text("".join(out))
    return conf


def start_service_broker(argv, conf, run_dir, env):
    """Start argv as systemd would start the unit: in its RuntimeDirectory
    (run_dir, root-owned 0755 there) with NOTIFY_SOCKET; the socket path
    comes from GPUSHARE_BROKER because /run/gpushare is not ours to use."""
    run_dir.mkdir(mode=0o755)
    return gstest.Broker(run_dir, env, ["--config", str(conf)], cmd=argv).start()


def test_unit_has_what_the_broker_needs_and_nothing_that_breaks_it():
    # The build's $(bindir), as the build's kernel.json has it.
    ks = os.path.join(gstest.BUILDDIR, "kernelspecs", "shared-gpu", "kernel.json")
    check_unit(UNIT, os.path.dirname(json.load(open(ks))["argv"][0]))


@pytest.mark.skipif(not shutil.which("systemd-analyze"),
                    reason="systemd-analyze is not installed (Debian package systemd)")
def test_systemd_analyze_verify_accepts_it(tmp_path):
    rc, complaints = systemd_verify(UNIT, tmp_path, gstest.BROKER)
    assert rc == 0 and not complaints, complaints


def test_exec_start_serves_with_the_example_config(tmp_path, sim, short_tmp):
    argv = [gstest.BROKER] + shlex.split(read_unit(UNIT)["Service"]["ExecStart"][0])[1:]
    conf = service_conf(tmp_path, EXAMPLE_CONF, uncomment=True)
    b = start_service_broker(argv, conf, short_tmp / "gpushare", sim)
    try:
        st = os.stat(short_tmp / "gpushare" / "broker.sock")
        assert (st.st_gid, st.st_mode & 0o777) == (os.getgid(), 0o660)
        assert b.status()["policy"] == "adaptive"
    finally:
        assert b.stop() == 0  # SIGTERM, as systemctl stop
    assert not os.path.exists(short_tmp / "gpushare" / "broker.sock")
