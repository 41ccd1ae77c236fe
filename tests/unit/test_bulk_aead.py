"""The bulk channel's cipher (geoserver/native/bulk_aead.cpp): AEGIS-256 from pyzmq's own
libsodium, one sealer and one opener per (link, direction, epoch)."""
from __future__ import annotations

import ctypes
import glob
import os
import struct

import numpy as np
import pytest
import zmq

dataplane = pytest.importorskip("netstorm.geoserver._dataplane")
if dataplane.bulk_unavailable():
    pytest.skip(f"no AEGIS-256 here: {dataplane.bulk_unavailable()}", allow_module_level=True)

BulkSealer, BulkOpener, BulkRefused = (dataplane.BulkSealer, dataplane.BulkOpener,
                                       dataplane.BulkRefused)
KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))
OVERHEAD = dataplane.BULK_OVERHEAD
HEADER = bytes(range(38))            # stands for the 38-byte wire header


def pair(key=KEY, src=0, dst=1, epoch=3):
    return BulkSealer(key, src, dst, epoch), BulkOpener(key, src, dst, epoch)


def refusal(opener, frame, in_place=False) -> BulkRefused:
    with pytest.raises(BulkRefused) as caught:
        if in_place:
            opener.open_in_place(bytearray(frame))
        else:
            opener.open(frame)
    return caught.value


def test_layout_constants():
    assert dataplane.BULK_KEY_BYTES == 32
    assert OVERHEAD == 8 + 32
    assert dataplane.sodium_version() >= "1.0.19"


@pytest.mark.parametrize("size", [0, 1, 31, 32, 33, 255, 4096 + 7, (1 << 20) + 3])
def test_round_trip(size):
    sealer, opener = pair()
    payload = os.urandom(size)
    frame = sealer.seal(HEADER, payload)
    assert isinstance(frame, bytes) and len(frame) == 38 + size + OVERHEAD
    assert struct.unpack_from("<Q", frame)[0] == 1
    if size >= 32:
        assert payload not in frame       # encrypted
    assert opener.open(frame) == HEADER + payload
    assert opener.last_counter == 1 and sealer.sealed == 1


def test_buffers_of_any_kind_no_copy_of_the_input():
    sealer, opener = pair()
    array = np.arange(1000, dtype=np.float32)
    for part in (array, memoryview(array), bytearray(array.tobytes()), zmq.Frame(array, copy=True)):
        frame = sealer.seal(HEADER, part)
        assert opener.open(memoryview(frame)) == HEADER + array.tobytes()
    with pytest.raises(TypeError, match="contiguous"):
        sealer.seal(array[::2])
    with pytest.raises(TypeError, match="a part to seal"):
        sealer.seal("text")


def test_counters_increase_and_gaps_are_allowed():
    sealer, opener = pair()
    frames = [sealer.seal(HEADER, bytes([i])) for i in range(5)]
    assert [struct.unpack_from("<Q", f)[0] for f in frames] == [1, 2, 3, 4, 5]
    assert opener.open(frames[0])[-1] == 0
    assert opener.open(frames[3])[-1] == 3       # 2 and 3 lost in a reconnect: a gap
    assert opener.last_counter == 4
    for late in (frames[1], frames[2]):          # but never back
        assert refusal(opener, late).reason == "replay"
    assert opener.open(frames[4])[-1] == 4


def test_wrong_key_refused_and_state_kept():
    sealer, _ = pair()
    _, opener = pair(key=OTHER_KEY)
    frame = sealer.seal(HEADER, b"payload")
    caught = refusal(opener, frame)
    assert caught.reason == "forged" and caught.counter == 1
    assert "dc 0 -> dc 1, epoch 3" in str(caught)
    assert opener.last_counter == 0 and opener.refused == 1


@pytest.mark.parametrize("where", ["counter", "header", "payload", "tag", "length"])
def test_tampering_refused(where):
    sealer, opener = pair()
    frame = bytearray(sealer.seal(HEADER, bytes(100)))
    if where == "counter":
        frame[0] ^= 2                 # counter 1 -> 3: the nonce and AAD change
    elif where == "header":
        frame[8 + 5] ^= 1
    elif where == "payload":
        frame[8 + 38 + 50] ^= 0x80
    elif where == "tag":
        frame[-1] ^= 1
    else:
        del frame[8 + 38 + 99]        # one byte of payload dropped
    assert refusal(opener, bytes(frame)).reason == "forged"
    assert opener.last_counter == 0   # nothing kept: a forged high counter blocks nothing
    assert opener.open(sealer.seal(HEADER, b"next")) == HEADER + b"next"


def test_short_frames_refused():
    _, opener = pair()
    for length in (0, 7, 8, OVERHEAD - 1):
        caught = refusal(opener, bytes(length))
        assert caught.reason == "short"
    assert refusal(opener, bytes(OVERHEAD)).reason == "replay"     # counter 0: never sent
    caught = refusal(opener, struct.pack("<Q", 1) + bytes(32))      # empty, a zero tag
    assert caught.reason == "forged"


def test_replay_refused():
    sealer, opener = pair()
    frame = sealer.seal(HEADER, b"once")
    assert opener.open(frame) == HEADER + b"once"
    caught = refusal(opener, frame)
    assert caught.reason == "replay" and caught.counter == 1
    assert "not above the last accepted 1" in str(caught)
    caught = refusal(opener, frame, in_place=True)
    assert caught.reason == "replay"


@pytest.mark.parametrize("other", [dict(src=2, dst=1), dict(src=1, dst=0), dict(epoch=4),
                                   dict(src=0, dst=2)])
def test_cross_link_and_epoch_refused(other):
    """Same key on another link, the other direction, or another epoch: the AAD and nonce
    name the link and epoch, so the tag fails."""
    sealer, _ = pair()
    params = dict(src=0, dst=1, epoch=3)
    params.update(other)
    _, opener = pair(**params)
    assert refusal(opener, sealer.seal(HEADER, b"chunk")).reason == "forged"


def test_in_place_decrypt_and_encrypt():
    """libsodium's AEGIS-256 takes c == m both ways: sealing in place gives the very frame
    seal() gives, and opening in place gives the plaintext in the frame's own memory."""
    payload = np.random.default_rng(1).integers(0, 255, 100_003, dtype=np.uint8).tobytes()
    reference = BulkSealer(KEY, 0, 1, 3).seal(HEADER, payload)
    frame = bytearray(8) + bytearray(HEADER + payload) + bytearray(32)
    assert BulkSealer(KEY, 0, 1, 3).seal_in_place(frame) == 1
    assert bytes(frame) == reference
    opener = BulkOpener(KEY, 0, 1, 3)
    array = np.frombuffer(frame, dtype=np.uint8)       # a writable buffer that is not bytes
    view = opener.open_in_place(array)
    assert isinstance(view, memoryview) and view.nbytes == len(HEADER) + len(payload)
    assert bytes(view) == HEADER + payload
    assert bytes(frame[8:-32]) == HEADER + payload     # decrypted where it lay
    received = zmq.Frame(reference, copy=True)                 # what recv(copy=False) gives
    assert bytes(BulkOpener(KEY, 0, 1, 3).open_in_place(received)) == HEADER + payload


def test_in_place_refusal_leaves_no_plaintext():
    sealer, opener = pair()
    frame = bytearray(sealer.seal(HEADER, b"secret payload!" * 4))
    frame[-1] ^= 1
    with pytest.raises(BulkRefused):
        opener.open_in_place(frame)
    assert b"secret" not in frame
    with pytest.raises(TypeError, match="writable"):
        opener.open_in_place(sealer.seal(b"x"))        # bytes are read-only


def test_seal_into_and_sizes():
    sealer, opener = pair()
    out = bytearray(200)
    n = sealer.seal_into(out, HEADER, b"abc")
    assert n == 38 + 3 + OVERHEAD
    assert opener.open(bytes(out[:n])) == HEADER + b"abc"
    with pytest.raises(ValueError, match="needs"):
        sealer.seal_into(bytearray(10), HEADER)
    with pytest.raises(dataplane.BulkError):
        sealer.seal_in_place(bytearray(OVERHEAD - 1))


def test_bad_keys_and_close():
    with pytest.raises(dataplane.BulkError, match="32 bytes, not 31"):
        BulkSealer(bytes(31), 0, 1, 0)
    sealer, opener = pair()
    sealer.close()
    opener.close()
    assert sealer.closed and opener.closed
    with pytest.raises(dataplane.BulkError, match="closed"):
        sealer.seal(b"x")
    with pytest.raises(dataplane.BulkError, match="closed"):
        opener.open(bytes(100))


def _libsodium():
    path = next(p for p in open("/proc/self/maps").read().split()
                if "libsodium" in p and p.startswith("/"))
    return ctypes.CDLL(path)


def test_construction_matches_libsodium_directly():
    """The documented construction, rebuilt with libsodium's own combined API through ctypes:
    nonce = counter ‖ epoch ‖ src ‖ dst ‖ "nsbulk01", AAD = "nsbulk01" ‖ src ‖ dst ‖ epoch ‖
    counter, frame = counter ‖ ciphertext ‖ tag."""
    sodium = _libsodium()
    src, dst, epoch = 2, 5, 7
    sealer = BulkSealer(KEY, src, dst, epoch)
    sealer.seal(b"first")
    plain = HEADER + b"payload bytes"
    frame = sealer.seal(plain)
    counter = 2
    nonce = struct.pack("<QQII", counter, epoch, src, dst) + b"nsbulk01"
    aad = b"nsbulk01" + struct.pack("<IIQQ", src, dst, epoch, counter)
    out = ctypes.create_string_buffer(len(plain) + 32)
    out_len = ctypes.c_ulonglong()
    assert sodium.crypto_aead_aegis256_encrypt(out, ctypes.byref(out_len), plain,
                                               ctypes.c_ulonglong(len(plain)), aad,
                                               ctypes.c_ulonglong(len(aad)), None, nonce,
                                               KEY) == 0
    assert frame == struct.pack("<Q", counter) + out.raw[:out_len.value]


def test_one_libsodium_only():
    maps = open("/proc/self/maps").read()
    assert len({line.split()[-1] for line in maps.splitlines() if "libsodium" in line}) == 1
    assert not glob.glob(os.path.join(os.path.dirname(dataplane.__file__), "*sodium*"))
