"""What one PushDelta costs over loopback: a small and a dense delta, plain text and mutual TLS.

First the codec alone (encode a delta's messages, decode one received), then the round trip
of real gRPC calls to a server that decodes and checks each delta as a worker
does (protocol/msgcost.py, the figure `simulate --calibrate` uses), median of ``--trips``
calls; with TLS the client and server present throw-away certificates and a run token, as
`hogwild run` sets them up. Usage:

    python bench/bench_msgcost.py [--dim 47236] [--trips 200] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import timeit
from pathlib import Path

import numpy as np

from hogwild.cluster.transport.certs import write_bundle
from hogwild.cluster.transport.msgcost import measure
from hogwild.cluster.transport.security import Security
from hogwild.cluster.wire import pb
from hogwild.cluster.wire.codec import DeltaHeader, decode_delta, encode_delta_parts


def tls_security(directory: Path) -> Security:
    bundle = write_bundle(directory, overwrite=True)
    return Security(ca=bundle.ca.read_bytes(), cert=bundle.cert("worker").read_bytes(),
                    key=bundle.key("worker").read_bytes(),
                    token=bundle.token.read_text().strip())


def codec_micros(dim: int, entries: int) -> tuple[float, float]:
    """(encode, decode) of one delta of ``entries`` entries in microseconds: the best of 7
    repeats of 200 calls."""
    rng = np.random.default_rng(0)
    idx = np.sort(rng.choice(dim, size=entries, replace=False)).astype(np.int32)
    val = rng.normal(0.0, 1e-3, entries).astype(np.float32)
    header = DeltaHeader(run_id="bench", worker_id=0, round=1, seq=1, dim=dim)
    wire = [m.SerializeToString() for m in encode_delta_parts(header, idx, val)]
    received = [pb.Delta.FromString(b) for b in wire]

    def encode() -> None:
        encode_delta_parts(header, idx, val)

    def decode() -> None:
        for message in received:
            decode_delta(message, dim)

    return tuple(1e6 * min(timeit.repeat(f, number=200, repeat=7)) / 200  # type: ignore[return-value]
                 for f in (encode, decode))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=47_236)
    parser.add_argument("--trips", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3, help="alternating measurements")
    args = parser.parse_args()
    print("codec     entries  encode us  decode us")
    for entries in (16, args.dim):
        enc, dec = codec_micros(args.dim, entries)
        print(f"          {entries:7,}  {enc:9.1f}  {dec:9.1f}")
    with tempfile.TemporaryDirectory(prefix="hw-msgcost-") as tmp:
        kinds = {"plain": Security(), "tls": tls_security(Path(tmp))}
        small: dict[str, list[float]] = {k: [] for k in kinds}
        dense: dict[str, list[float]] = {k: [] for k in kinds}
        for _ in range(args.repeats):
            for name, security in kinds.items():
                cost = measure(args.dim, args.trips, security=security)
                small[name].append(cost.small_seconds)
                dense[name].append(cost.dense_seconds)
    print(f"PushDelta round trip over loopback, dim {args.dim:,}, median of {args.trips} "
          f"calls, median of {args.repeats} alternating measurements")
    print("transport  small (16 entries) ms  dense (all entries) ms")
    for name in kinds:
        print(f"{name:9}  {1e3 * statistics.median(small[name]):20.3f}  "
              f"{1e3 * statistics.median(dense[name]):22.3f}")


if __name__ == "__main__":
    main()
