"""geoserver/server/store_keys.py: a key's entry and a round's completeness."""
import numpy as np

from netstorm.geoserver.server.store_keys import KeyEntry, Round


def test_an_entry_counts_its_elements():
    assert KeyEntry(0, np.dtype(np.float32), (3, 4)).size == 12
    assert KeyEntry(1, np.dtype(np.float32), ()).size == 1


def test_a_round_is_complete_once_every_chunk_sent_is_back_or_it_stays_local():
    rnd = Round()
    assert not rnd.complete                     # not sent to the WAN yet
    rnd.layout = [(0, 4, 0), (4, 8, 1)]
    rnd.chunks_done = 1
    assert not rnd.complete
    rnd.chunks_done = 2
    assert rnd.complete
    assert Round(local_only=True).complete      # hfa: a round within the DC
