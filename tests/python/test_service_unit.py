"""The system service as `make install` writes it (broker/gpushare-broker.service):
it has what the design relies on and none of the sandboxing that would cut
the broker off from the GPU or other users' processes, systemd's own parser
accepts it, and its ExecStart serves with the example configuration.
test_debian_package.py runs the same checks on the packaged unit."""
import json
import os
import shlex
import shutil

import pytest

import gstest
from gstest import check_unit, read_unit, service_conf, start_service_broker, systemd_verify

UNIT = gstest.UNIT
EXAMPLE_CONF = gstest.EXAMPLE_CONF


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

    def start(metrics_port):
        conf = service_conf(tmp_path, EXAMPLE_CONF, uncomment=True, port=metrics_port)
        return start_service_broker(argv, conf, short_tmp / "gpushare", sim)

    b = gstest.with_ports(start)
    try:
        st = os.stat(short_tmp / "gpushare" / "broker.sock")
        assert (st.st_gid, st.st_mode & 0o777) == (os.getgid(), 0o660)
        assert b.status()["policy"] == "adaptive"
    finally:
        assert b.stop() == 0  # SIGTERM, as systemctl stop
    assert not os.path.exists(short_tmp / "gpushare" / "broker.sock")
