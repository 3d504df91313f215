#!/usr/bin/env python3
"""A float32 add of two large arrays from Python, through tensorcompute beside Apache Arrow
Flight, the transport a Python user would otherwise pick for moving arrays to a compute
service, in one run on one machine.

Flight: a pyarrow Flight server in a process of its own (this script with --serve_flight), on
loopback TCP, adding with pyarrow.compute:
- DoExchange: the two inputs go as record batches of two columns, each batch's sum comes back
  on the same call while the next ones are still being sent;
- DoPut + DoGet: the inputs stored under a key, then their sum fetched;
each over one stream, and over --streams streams at once (the arrays cut into equal parts,
each part on its own client and connection). The sum stays in Flight's record batches (no
copy into one array is timed).

tensorcompute: the server (--server_binary) on loopback TCP, the Python client
(tensorcompute_client) over one connection and over --streams, with its native library
(where it is installed) and with grpcio alone. The result is a NumPy array.

GB/s counts 2 inputs + 1 output; every result is checked against NumPy after its timing.
Needs pyarrow with Flight (the GPU machine's Python has it)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from python_bench import start_server, wait_port


def serve_flight(port_file):
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.flight as fl

    class AddServer(fl.FlightServerBase):
        def __init__(self):
            super().__init__("grpc://127.0.0.1:0")
            self.tables = {}
            self.lock = threading.Lock()

        def do_exchange(self, context, descriptor, reader, writer):
            started = False
            for chunk in reader:
                batch = chunk.data
                out = pa.RecordBatch.from_arrays([pc.add(batch.column(0), batch.column(1))],
                                                 names=["sum"])
                if not started:
                    writer.begin(out.schema)
                    started = True
                writer.write_batch(out)

        def do_put(self, context, descriptor, reader, writer):
            table = reader.read_all()
            with self.lock:
                self.tables[descriptor.path[0]] = table

        def do_get(self, context, ticket):
            with self.lock:
                table = self.tables.pop(ticket.ticket)
            batches = [pa.RecordBatch.from_arrays([pc.add(b.column(0), b.column(1))],
                                                  names=["sum"])
                       for b in table.to_batches()]
            return fl.RecordBatchStream(pa.Table.from_batches(batches))

    server = AddServer()
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.port))
    os.rename(port_file + ".tmp", port_file)
    server.serve()


def median_time(fn, reps):
    fn()  # Connections, first allocations.
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


class Flight:
    def __init__(self, port, streams, batch_rows):
        import pyarrow as pa
        import pyarrow.flight as fl
        self.pa, self.fl = pa, fl
        self.location = f"grpc://127.0.0.1:{port}"
        self.clients = [fl.FlightClient(self.location) for _ in range(streams)]
        self.batch_rows = batch_rows
        self.schema = pa.schema([("a", pa.float32()), ("b", pa.float32())])
        self.key = 0

    def _batches(self, a, b):
        pa = self.pa
        for lo in range(0, len(a), self.batch_rows):
            hi = min(len(a), lo + self.batch_rows)
            cols = [pa.Array.from_buffers(pa.float32(), hi - lo, [None, pa.py_buffer(x[lo:hi])])
                    for x in (a, b)]
            yield pa.RecordBatch.from_arrays(cols, schema=self.schema)

    def exchange_part(self, client, a, b):
        writer, reader = client.do_exchange(self.fl.FlightDescriptor.for_command(b"add"))
        out = []

        def read():
            for chunk in reader:
                out.append(chunk.data)

        t = threading.Thread(target=read)
        t.start()
        writer.begin(self.schema)
        for batch in self._batches(a, b):
            writer.write_batch(batch)
        writer.done_writing()
        t.join()
        writer.close()
        return out

    def put_get_part(self, client, a, b, key):
        writer, _ = client.do_put(self.fl.FlightDescriptor.for_path(key), self.schema)
        for batch in self._batches(a, b):
            writer.write_batch(batch)
        writer.close()
        return list(client.do_get(self.fl.Ticket(key)).read_all().to_batches())

    def run(self, kind, a, b):
        """The sum's record batches, in order."""
        parts = np.array_split(np.arange(len(a)), len(self.clients))
        results = [None] * len(parts)

        def one(i):
            lo, hi = (parts[i][0], parts[i][-1] + 1) if len(parts[i]) else (0, 0)
            c = self.clients[i]
            if kind == "exchange":
                results[i] = self.exchange_part(c, a[lo:hi], b[lo:hi])
            else:
                self.key += 1
                results[i] = self.put_get_part(c, a[lo:hi], b[lo:hi], f"k{self.key}-{i}".encode())

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(parts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return [batch for r in results for batch in r]


def check(name, got, expect):
    if not np.array_equal(got, expect):
        raise SystemExit(f"{name}: wrong result")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve_flight", help=argparse.SUPPRESS)
    ap.add_argument("--server_binary", help="tensorcompute-server (omit: Flight alone)")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--mib", type=int, default=256, help="MiB per input")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--batch_mib", default="4,16,64",
                    help="Flight record batch sizes to run, MiB per column (comma-separated)")
    ap.add_argument("--json")
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    if args.serve_flight:
        serve_flight(args.serve_flight)
        return

    import pyarrow
    n = args.mib << 18
    rng = np.random.default_rng()
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    expect = a + b
    gb = 3 * n * 4 / 1e9
    rows = []
    procs = []
    try:
        port_file = os.path.join(tempfile.mkdtemp(prefix="tc-flight-"), "port")
        flight_proc = subprocess.Popen([sys.executable, os.path.abspath(__file__),
                                        f"--serve_flight={port_file}"])
        procs.append(flight_proc)
        port = wait_port(flight_proc, port_file, "the Flight server")
        for streams, batch_mib in [(s, m) for s in (1, args.streams)
                                   for m in args.batch_mib.split(",")]:
            flight = Flight(port, streams, max(1, int(float(batch_mib) * (1 << 18))))
            for kind, label in (("exchange", "DoExchange"), ("putget", "DoPut + DoGet")):
                last = {}

                def call():
                    last["out"] = None  # The previous result goes before the next call.
                    last["out"] = flight.run(kind, a, b)

                secs = median_time(call, args.reps)
                out = np.concatenate([x.column(0).to_numpy() for x in last["out"]])
                check(label, out, expect)
                rows.append({"system": f"Arrow Flight {pyarrow.__version__}",
                             "mode": f"{label}, {streams} stream{'s' * (streams > 1)}, "
                                     f"batches of {batch_mib} MiB",
                             "seconds": secs, "gbps": gb / secs})
                print(f"flight {label} x{streams} {batch_mib} MiB: {gb / secs:.2f} GB/s",
                      file=sys.stderr)
        if args.server_binary:
            import tensorcompute_client as tcc
            from tensorcompute_client import native as native_mod
            server, target = start_server(args.server_binary, args.backend,
                                          ["--max_message_bytes=1073741824"])
            procs.append(server)
            lib = native_mod.load()
            modes = [("native library", True, c) for c in (1, args.streams)] if lib else []
            modes.append(("grpcio", False, 1))
            for transport, native, connections in modes:
                c = tcc.Client(target, shared_memory=False, native=native, timeout=600,
                               connections=connections, max_message_bytes=1 << 30)
                last = {}

                def call():
                    last["out"] = None
                    last["out"] = c.compute("add", a, b)

                secs = median_time(call, args.reps if native else 1)
                check(transport, last["out"], expect)
                c.close()
                rows.append({"system": "tensorcompute (Python client)",
                             "mode": f"{transport}, {connections} connection"
                                     f"{'s' * (connections > 1)}",
                             "seconds": secs, "gbps": gb / secs})
                print(f"tensorcompute {transport} x{connections}: {gb / secs:.2f} GB/s",
                      file=sys.stderr)
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)
    print(f"\nfloat32 add of two {args.mib} MiB inputs from Python over loopback TCP; GB/s "
          f"counts 2 inputs + 1 output; median of {args.reps} (grpcio: one call); Flight's "
          f"record batches in MiB per column. {args.label}\n")
    print("| system | mode | seconds | GB/s |\n|---|---|---:|---:|")
    for r in rows:
        print(f"| {r['system']} | {r['mode']} | {r['seconds']:.4f} | {r['gbps']:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"mib": args.mib, "reps": args.reps, "batch_mib": args.batch_mib,
                       "label": args.label, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
