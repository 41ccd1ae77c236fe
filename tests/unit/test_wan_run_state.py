"""netstorm.wan.run_state: a run's state file and the address range it reserves."""
import pytest

from netstorm.wan.netns import WanError
from netstorm.wan.run_state import OCTETS, free_octet, read_state, state_lock, used_octets, \
    write_state


def test_state_files_round_trip_and_a_bad_one_is_named(tmp_path):
    path = tmp_path / "abc.json"
    write_state(path, {"run": "abc", "octet": 70})
    assert read_state(path, "abc") == {"run": "abc", "octet": 70}
    assert not path.with_suffix(".tmp").exists()
    with pytest.raises(WanError, match=f"no state file {tmp_path / 'zz.json'} for run 'zz'"):
        read_state(tmp_path / "zz.json", "zz")
    path.write_text("{")
    with pytest.raises(WanError, match=f"{path}: not valid JSON"):
        read_state(path, "abc")


def test_a_free_octet_is_one_no_other_run_holds(tmp_path):
    own = tmp_path / "me.json"
    with state_lock(tmp_path):
        first = free_octet("me", tmp_path, own)
        assert first in OCTETS
        write_state(tmp_path / "other.json", {"octet": first})
        write_state(own, {"octet": 99})                         # its own file never counts
        (tmp_path / "broken.json").write_text("{")              # nor an unreadable one
        assert used_octets(tmp_path, own) == {first}
        second = free_octet("me", tmp_path, own)
        assert second in OCTETS and second != first
        for octet in OCTETS:
            write_state(tmp_path / f"r{octet}.json", {"octet": octet})
        with pytest.raises(WanError, match=f"all {len(OCTETS)} address ranges are held"):
            free_octet("me", tmp_path, own)
