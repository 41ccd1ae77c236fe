"""netstorm.bench.dataplane: which data plane the servers said they ran."""
from netstorm.bench.dataplane import dataplane_record, parse_dataplane_lines
from netstorm.bench.systems import (DATAPLANE_OF, SYSTEMS, cluster_dataplane_missing,
                                    configured_dataplane)

LOG = """[server dc1] INFO geoserver: data plane: native
[worker dc1/0] iter 1/4 9.1s
[server dc2] INFO geoserver: data plane: python (configured: [transport] dataplane = "python")
[server dc3] data plane: python
"""


def test_lines_are_read_with_their_process_and_reason():
    rows = parse_dataplane_lines(LOG)
    assert rows == [{"process": "server dc1", "dataplane": "native"},
                    {"process": "server dc2", "dataplane": "python",
                     "reason": 'configured: [transport] dataplane = "python"'},
                    {"process": "server dc3", "dataplane": "python"}]
    assert parse_dataplane_lines("data plane: native") == [{"process": "",
                                                           "dataplane": "native"}]


def test_the_record_says_what_ran_and_falls_back_to_the_configured_value(tmp_path):
    log = tmp_path / "x.log"
    log.write_text(LOG)
    rec = dataplane_record("auto", log)
    assert rec["ran"] == "mixed" and rec["servers"] == {"native": 1, "python": 2}
    assert rec["source"] == "server logs" and len(rec["python_reasons"]) == 1
    log.write_text("[server dc1] data plane: python\n")
    assert dataplane_record("python", log)["ran"] == "python"
    assert dataplane_record("python", tmp_path / "none.log") == {
        "configured": "python", "ran": "python", "source": "configured"}
    assert dataplane_record(None, log) == {}


def test_systems_say_their_configured_data_plane():
    assert "netstorm-fapt-python" in SYSTEMS and DATAPLANE_OF["netstorm-fapt-python"] == "python"
    assert configured_dataplane("netstorm-fapt-python") == "python"
    assert configured_dataplane("netstorm-fapt") == "auto"
    assert configured_dataplane("mxnet-sharded") is None
    assert cluster_dataplane_missing(["netstorm-fapt"]) == []
