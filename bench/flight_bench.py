#!/usr/bin/env python3
"""A float32 add of two large arrays from Python, through tensorcompute beside Apache Arrow
Flight, the transport a Python user would otherwise pick for moving arrays to a compute
service, in one run on one machine, Flight tuned as its users tune it.

Flight: a pyarrow Flight server adding with pyarrow.compute, on loopback TCP, in a process of
its own (this script with --serve_flight) and in the client's own process (no second Python
interpreter between the bytes and the add), with record batches of several sizes:
- DoExchange: the two inputs go as record batches of two columns, each batch's sum comes back
  on the same call while the next ones are still being sent;
- DoPut + DoGet: the inputs stored under a key, then their sum fetched;
each over one stream, and over --streams streams at once (the arrays cut into equal parts,
each part on its own client and connection). The sum stays in Flight's record batches (no
copy into one array is timed). Flight's best of all of these, per size and stream count, is
the anchor.

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


def flight_server():
    """A Flight server adding two columns, serving on a loopback port (server.port) from the
    moment it is made; server.shutdown() stops it."""
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

    return AddServer()


def serve_flight(port_file):
    server = flight_server()
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.port))
    os.rename(port_file + ".tmp", port_file)
    server.serve()


PLACES = {"process": "its own process", "in-process": "the client's process"}


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
        k = len(self.clients)
        bounds = [(i * len(a) // k, (i + 1) * len(a) // k) for i in range(k)]
        results = [None] * k
        self.key += 1
        key = self.key

        def one(i):
            lo, hi = bounds[i]
            c = self.clients[i]
            if kind == "exchange":
                results[i] = self.exchange_part(c, a[lo:hi], b[lo:hi])
            else:
                results[i] = self.put_get_part(c, a[lo:hi], b[lo:hi], f"k{key}-{i}".encode())

        threads = [threading.Thread(target=one, args=(i,)) for i in range(k)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return [batch for r in results for batch in r]

    def close(self):
        for c in self.clients:
            c.close()


def check(name, got, expect):
    if not np.array_equal(got, expect):
        raise SystemExit(f"{name}: wrong result")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve_flight", help=argparse.SUPPRESS)
    ap.add_argument("--server_binary", help="tensorcompute-server (omit: Flight alone)")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--mib", default="16,256", help="MiB per input (comma-separated)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--batch_mib", default="1,4,16,64",
                    help="Flight record batch sizes to run, MiB per column (comma-separated)")
    ap.add_argument("--flight_servers", default="process,in-process",
                    help="where Flight's server runs: its own process, the client's, both, "
                         "or neither (empty: tensorcompute alone)")
    ap.add_argument("--json")
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    if args.serve_flight:
        serve_flight(args.serve_flight)
        return

    wheres = [w for w in args.flight_servers.split(",") if w]
    flight_name = "Arrow Flight"
    if wheres:  # Without Flight (tensorcompute alone) pyarrow is not needed.
        import pyarrow
        flight_name = f"Arrow Flight {pyarrow.__version__}"
    sizes = [int(m) for m in args.mib.split(",")]
    stream_counts = sorted({1, args.streams})
    rng = np.random.default_rng()
    rows = []
    procs = []
    servers = {}
    tc = {}
    try:
        for where in wheres:
            if where == "process":
                port_file = os.path.join(tempfile.mkdtemp(prefix="tc-flight-"), "port")
                proc = subprocess.Popen([sys.executable, os.path.abspath(__file__),
                                         f"--serve_flight={port_file}"])
                procs.append(proc)
                servers[where] = (wait_port(proc, port_file, "the Flight server"), None)
            elif where == "in-process":  # Serving from the moment it is made.
                server = flight_server()
                servers[where] = (server.port, server)
            else:
                raise SystemExit(f"--flight_servers: unknown {where!r}")
        if args.server_binary:
            import tensorcompute_client as tcc
            from tensorcompute_client import native as native_mod
            server, target = start_server(args.server_binary, args.backend,
                                          ["--max_message_bytes=1073741824"])
            procs.append(server)
            modes = [("native library", True, c) for c in stream_counts] \
                if native_mod.load() else []
            modes.append(("grpcio", False, 1))
            for transport, native, connections in modes:
                tc[(transport, connections)] = tcc.Client(
                    target, shared_memory=False, native=native, timeout=600,
                    connections=connections, max_message_bytes=1 << 30)
        for mib in sizes:
            n = mib << 18
            a = rng.standard_normal(n, dtype=np.float32)
            b = rng.standard_normal(n, dtype=np.float32)
            expect = a + b
            gb = 3 * n * 4 / 1e9
            for streams in stream_counts:
                for where, (port, _) in servers.items():
                    for batch_mib in args.batch_mib.split(","):
                        if float(batch_mib) > mib:
                            continue
                        flight = Flight(port, streams, max(1, int(float(batch_mib) * (1 << 18))))
                        for kind, label in (("exchange", "DoExchange"),
                                            ("putget", "DoPut + DoGet")):
                            last = {}

                            def call():
                                last["out"] = None  # The previous result goes first.
                                last["out"] = flight.run(kind, a, b)

                            secs = median_time(call, args.reps)
                            out = np.concatenate([x.column(0).to_numpy() for x in last["out"]])
                            check(label, out, expect)
                            last.clear()
                            rows.append({"system": flight_name, "mib": mib, "streams": streams,
                                         "mode": f"{label}, server in {PLACES[where]}, "
                                                 f"batches of "
                                                 f"{batch_mib} MiB",
                                         "seconds": secs, "gbps": gb / secs})
                            print(f"{mib} MiB flight {label} x{streams} {where} {batch_mib} MiB: "
                                  f"{gb / secs:.2f} GB/s", file=sys.stderr)
                        flight.close()
            for (transport, connections), c in tc.items():
                last = {}

                def call():
                    last["out"] = None
                    last["out"] = c.compute("add", a, b)

                secs = median_time(call, args.reps if transport != "grpcio" else 1)
                check(transport, last["out"], expect)
                last.clear()
                rows.append({"system": "tensorcompute (Python client)", "mib": mib,
                             "streams": connections,
                             "mode": f"{transport}, {connections} connection"
                                     f"{'s' * (connections > 1)}",
                             "seconds": secs, "gbps": gb / secs})
                print(f"{mib} MiB tensorcompute {transport} x{connections}: {gb / secs:.2f} GB/s",
                      file=sys.stderr)
    finally:
        for c in tc.values():
            c.close()
        for _, server in servers.values():
            if server is not None:
                server.shutdown()
        for p in procs:
            p.terminate()
            p.wait(timeout=30)
    print(f"\nfloat32 add of two arrays from Python over loopback TCP; GB/s counts 2 inputs + "
          f"1 output; median of {args.reps} (grpcio: one call); Flight's record batches in MiB "
          f"per column. {args.label}\n")
    print("| MiB per input | streams | system | mode | seconds | GB/s |\n|---:|---:|---|---|---:|---:|")
    for r in rows:
        print(f"| {r['mib']} | {r['streams']} | {r['system']} | {r['mode']} | "
              f"{r['seconds']:.4f} | {r['gbps']:.2f} |")
    summary = []
    for mib in sizes:
        for streams in stream_counts:
            flights = [r for r in rows if r["system"] == flight_name and r["mib"] == mib
                       and r["streams"] == streams]
            ours = [r for r in rows if r["system"] != flight_name and r["mib"] == mib
                    and r["streams"] == streams and r["mode"].startswith("native")]
            if flights and ours:
                best = max(flights, key=lambda r: r["gbps"])
                summary.append({"mib": mib, "streams": streams, "flight_best": best["mode"],
                                "flight_gbps": best["gbps"], "tensorcompute_gbps": ours[0]["gbps"],
                                "ratio": ours[0]["gbps"] / best["gbps"]})
    if summary:
        print("\nAgainst Flight's best configuration of those above:\n")
        print("| MiB per input | streams | Flight's best | GB/s | tensorcompute, native | "
              "ratio |\n|---:|---:|---|---:|---:|---:|")
        for s in summary:
            print(f"| {s['mib']} | {s['streams']} | {s['flight_best']} | {s['flight_gbps']:.2f} "
                  f"| {s['tensorcompute_gbps']:.2f} | {s['ratio']:.2f}x |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"mib": sizes, "reps": args.reps, "batch_mib": args.batch_mib,
                       "label": args.label, "rows": rows, "against_best": summary}, f, indent=1)


if __name__ == "__main__":
    main()
