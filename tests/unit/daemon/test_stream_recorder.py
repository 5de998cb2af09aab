"""``StreamRecorder``: the capture thread writes without a lock, the sink thread syncs;
every record reaches the file once, in order, and ``sync`` covers what was written before it."""

from __future__ import annotations

import struct
import threading
from pathlib import Path

from daemon.recording import StreamRecorder, read_records


def _payload(n: int) -> bytes:
    return f"record {n}".encode() * (n % 4 + 1)


def test_sync_puts_every_record_written_before_it_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "stream.bin"
    recorder = StreamRecorder(path)
    for n in range(10):  # fewer than the capture thread writes out by itself
        recorder.write(0x1000 + n, _payload(n))
    assert path.stat().st_size == 0
    recorder.sync()
    assert list(read_records(path)) == [(0x1000 + n, _payload(n)) for n in range(10)]
    assert recorder.records == 10
    recorder.close()


def test_records_written_while_another_thread_syncs_are_all_kept_in_order(
    tmp_path: Path,
) -> None:
    path = tmp_path / "stream.bin"
    recorder = StreamRecorder(path)
    done = threading.Event()
    synced_sizes: list[int] = []

    def sink() -> None:
        while not done.is_set():
            recorder.sync()
            synced_sizes.append(path.stat().st_size)

    thread = threading.Thread(target=sink)
    thread.start()
    try:
        for n in range(50_000):
            recorder.write(n, _payload(n))
    finally:
        done.set()
        thread.join()
    recorder.close()
    assert list(read_records(path)) == [(n, _payload(n)) for n in range(50_000)]
    assert recorder.records == 50_000
    assert len(synced_sizes) > 1, "the sink thread synced while records were written"
    assert synced_sizes == sorted(synced_sizes)


def test_runs_of_frames_are_recorded_as_their_frames_one_by_one(tmp_path: Path) -> None:
    frames = [b"w" + struct.pack(">QQQ", 0x2000 + n, 0, 0) + _payload(n) for n in range(3000)]
    by_run, one_by_one = StreamRecorder(tmp_path / "runs"), StreamRecorder(tmp_path / "one")
    by_run.write_frames(frames, 0, 1)
    by_run.write_frames(frames, 1, 2999)  # over the pending limit: written out on the way
    by_run.write_frames(frames, 2999, 3000)
    for n in range(3000):
        one_by_one.write(0x2000 + n, _payload(n))
    by_run.close()
    one_by_one.close()
    assert (tmp_path / "runs").read_bytes() == (tmp_path / "one").read_bytes()
    assert list(read_records(tmp_path / "runs"))[1500] == (0x2000 + 1500, _payload(1500))
