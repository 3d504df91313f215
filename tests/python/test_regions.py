#!/usr/bin/env python3
"""Shared-memory regions through the pip-installed Python client against the real server (CPU
backend; --backend=cuda on a GPU machine): results against NumPy on fresh random inputs and
views, every bad input refused with a clear status, other identities kept out, a client that
tries to shrink its memfd or unmaps it, a client that dies, and memory back to zero after. Run
by run_client_package_test.sh."""
import argparse
import fcntl
import mmap
import os
import socket
import subprocess
import sys
import tempfile
import time
import unittest

import grpc
import numpy as np

import tensorcompute_client as tcc
from tensorcompute_client.v1 import tensor_service_pb2 as pb
from harness import start_server, stop_server, wait_for

ARGS = None
ALICE = "alice-token-0123456789"
BOB = "bob-token-0123456789ab"


def rpc_error(test, code, fn, *args, **kw):
    with test.assertRaises(grpc.RpcError) as e:
        fn(*args, **kw)
    test.assertEqual(e.exception.code(), code, e.exception.details())
    return e.exception.details()


class RegionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tokens = tempfile.NamedTemporaryFile("w", suffix=".tokens", delete=False)
        tokens.write(f"alice:{ALICE}\nbob:{BOB}\n")
        tokens.close()
        cls.proc, cls.target = start_server(ARGS.server, f"--auth_tokens_file={tokens.name}",
                                            "--max_message_bytes=1048576",
                                            f"--backend={ARGS.backend}")
        cls.alice = tcc.Client(cls.target, token=ALICE)
        cls.bob = tcc.Client(cls.target, token=BOB)
        cls.rng = np.random.default_rng()

    @classmethod
    def tearDownClass(cls):
        cls.alice.close()
        cls.bob.close()
        stop_server(cls.proc)

    def info(self):
        return self.alice.server_info()

    def test_server_offers_regions(self):
        info = self.info()
        self.assertTrue(info.region_socket.startswith("@tensorcompute-"), info.region_socket)
        self.assertEqual(info.backend, ARGS.backend)
        self.assertGreater(info.limits.region_quota_bytes, 0)
        # By default one identity may use the whole server-wide limit, a quarter of the RAM.
        self.assertEqual(info.limits.region_quota_bytes, info.limits.shared_memory_limit_bytes)
        ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        self.assertLessEqual(info.limits.shared_memory_limit_bytes, ram // 4)
        self.assertTrue(self.alice.shared_memory_available())

    def test_shared_arrays_in_and_out(self):
        for shape in [(1,), (7,), (257, 129), (3, 5, 1031)]:
            with self.subTest(shape=shape):
                x = self.alice.shared_array(shape, np.float32)
                y = self.alice.shared_array(shape[-1:], np.float32)
                out = self.alice.shared_array(shape, np.float32)
                x[...] = self.rng.standard_normal(shape)
                y[...] = self.rng.standard_normal(shape[-1:])
                got = self.alice.compute("add", x, y, out=out, alpha=2.0)
                self.assertIs(got, out)
                np.testing.assert_array_equal(out, x + np.float32(2) * y)

    def test_views_of_shared_arrays_are_not_copied(self):
        base = self.alice.shared_array((64, 96), np.float64)
        base[...] = self.rng.standard_normal(base.shape)
        views = {"transpose": base.T, "negative steps": base[::-1, ::-3],
                 "offset slice": base[5:, 7:90:2], "broadcast column": base[:, :1]}
        for name, v in views.items():
            with self.subTest(name):
                got = self.alice.compute("mul", v, v)
                np.testing.assert_array_equal(got, v * v)

    def test_plain_arrays_go_through_scratch(self):
        a = self.rng.standard_normal((300, 1001)).astype(np.float32)  # 1.2 MB > 1 MiB messages
        b = self.rng.integers(-5, 5, size=(1001,)).astype(np.int16)
        np.testing.assert_array_equal(self.alice.compute("mul", a[:, ::-1], b), a[:, ::-1] * b)
        c = self.rng.standard_normal((513, 1027)).astype(np.float16)
        np.testing.assert_array_equal(self.alice.compute("gt", c.T, np.float16(0)), c.T > 0)
        names = [r.name for r in self.alice.stub.ListRegions(
            pb.ListRegionsRequest(), metadata=self.alice.metadata).regions]
        self.assertIn("scratch", names)

    def test_many_threads_at_once_each_with_its_scratch(self):
        # 32 threads of one client, each making its scratch region at the same moment (as
        # Dask's threads do): the client keeps under the server's limit of unclaimed tickets.
        import threading
        import time
        c = tcc.Client(self.target, token=ALICE)
        self.addCleanup(c.close)
        # Each claim a little late, so that the 32 registrations surely overlap.
        state = c._shm()
        register = state.register
        state.register = lambda fd: (register(fd), time.sleep(0.05))[0]
        start = threading.Barrier(32)
        errors = []

        def run(seed):
            rng = np.random.default_rng(seed)
            a = rng.standard_normal(300_000).astype(np.float32)
            start.wait()
            try:
                np.testing.assert_array_equal(c.compute("add", a, a), a + a)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=run, args=(i,)) for i in range(32)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertEqual(errors, [])

    def tensor_in(self, region, dtype, shape, at=0, storage_bytes=None, **kw):
        n = int(np.prod(shape)) * np.dtype(np.float32).itemsize
        return pb.Tensor(dtype=dtype, shape=shape, region=region.id, region_offset=at,
                         storage_bytes=n if storage_bytes is None else storage_bytes, **kw)

    def test_scratch_output_is_sized_by_the_servers_plan(self):
        # The output is larger than any array input: a resident input broadcasts it, and the
        # expression widens it to float64. The client asks the server how large it will be.
        x = self.rng.standard_normal((1, 100_003)).astype(np.float32)
        r = self.alice.upload(self.rng.standard_normal((5, 1)).astype(np.float32))
        col = self.alice.download(r)
        got = self.alice.eval("cast(a, float64) * b", x, r)
        np.testing.assert_array_equal(got, x.astype(np.float64) * col.astype(np.float64))
        self.assertEqual(got.dtype, np.float64)
        self.alice.release(r)

    def test_bounds_and_alignment_are_checked(self):
        r = self.alice.region(4096)
        r.array((1024,), np.float32)[:] = 1
        c = self.alice
        bad = {
            "past the end": self.tensor_in(r, pb.float32, [1024], at=4),
            "negative offset": self.tensor_in(r, pb.float32, [4], at=-4),
            "misaligned": self.tensor_in(r, pb.float32, [4], at=2),
            "strides outside the storage": self.tensor_in(r, pb.float32, [4], storage_bytes=16,
                                                          strides=[8]),
            "offset outside the storage": self.tensor_in(r, pb.float32, [4], storage_bytes=16,
                                                         offset=2),
        }
        for name, t in bad.items():
            with self.subTest(name):
                d = rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT, c.stub.Compute,
                              pb.ComputeRequest(op="neg", inputs=[t]), metadata=c.metadata)
                self.assertIn("input 0", d)
        ok = self.tensor_in(r, pb.float32, [8])
        too_small = pb.ComputeRequest(op="neg", inputs=[ok], output_region=r.id,
                                      output_region_offset=4096 - 16)
        d = rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT, c.stub.Compute, too_small,
                      metadata=c.metadata)
        self.assertIn("output_region", d)
        both = pb.ComputeRequest(op="neg", inputs=[ok], output_region=r.id,
                                 keep_output_resident=True)
        rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT, c.stub.Compute, both,
                  metadata=c.metadata)
        # bool elements other than 0 and 1 are refused, as inline ones are.
        r.array((16,), np.uint8, 2048)[:] = 2
        d = rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT, c.stub.Compute,
                      pb.ComputeRequest(op="logical_not", inputs=[pb.Tensor(
                          dtype=pb.bool, shape=[16], region=r.id, region_offset=2048,
                          storage_bytes=16)]),
                      metadata=c.metadata)
        self.assertIn("0 or 1", d)
        # A good request on the same region still works.
        reply = c.stub.Compute(pb.ComputeRequest(op="neg", inputs=[ok], output_region=r.id,
                                                 output_region_offset=64), metadata=c.metadata)
        self.assertEqual(reply.output.region, r.id)
        self.assertEqual(len(reply.output.data), 0)
        np.testing.assert_array_equal(r.array((8,), np.float32, 64), -np.ones(8, np.float32))
        r.close()

    def test_other_identities_cannot_use_or_see_a_region(self):
        r = self.alice.region(1 << 16, name="alice's")
        t = pb.Tensor(dtype=pb.float32, shape=[16], region=r.id, storage_bytes=64)
        for call, req in [
                (self.bob.stub.Compute, pb.ComputeRequest(op="neg", inputs=[t])),
                (self.bob.stub.UnregisterRegion, pb.UnregisterRegionRequest(region=r.id))]:
            rpc_error(self, grpc.StatusCode.NOT_FOUND, call, req, metadata=self.bob.metadata)
        out_to_alice = pb.ComputeRequest(op="neg", inputs=[tcc.to_tensor(np.ones(16, np.float32))],
                                         output_region=r.id)
        rpc_error(self, grpc.StatusCode.NOT_FOUND, self.bob.stub.Compute, out_to_alice,
                  metadata=self.bob.metadata)
        mine = self.bob.stub.ListRegions(pb.ListRegionsRequest(), metadata=self.bob.metadata)
        self.assertNotIn(r.id, [x.region for x in mine.regions])
        theirs = self.alice.stub.ListRegions(pb.ListRegionsRequest(),
                                             metadata=self.alice.metadata)
        self.assertIn(r.id, [x.region for x in theirs.regions])
        # Without a token nothing at all.
        anon = tcc.Client(self.target)
        rpc_error(self, grpc.StatusCode.UNAUTHENTICATED, anon.stub.ListRegions,
                  pb.ListRegionsRequest())
        anon.close()
        r.close()

    def raw_register(self, fd, client=None):
        client = client or self.alice
        return client._shm().register(fd)

    def test_tickets_are_single_use_and_only_memfds_are_taken(self):
        fd = os.memfd_create("t", os.MFD_ALLOW_SEALING)
        os.ftruncate(fd, 4096)
        ticket = self.raw_register(fd)
        os.close(fd)
        info = self.alice.stub.RegisterRegion(pb.RegisterRegionRequest(ticket=ticket),
                                              metadata=self.alice.metadata)
        self.assertEqual(info.bytes, 4096)
        rpc_error(self, grpc.StatusCode.NOT_FOUND, self.bob.stub.RegisterRegion,
                  pb.RegisterRegionRequest(ticket=ticket), metadata=self.bob.metadata)
        self.alice.stub.UnregisterRegion(pb.UnregisterRegionRequest(region=info.region),
                                         metadata=self.alice.metadata)
        rpc_error(self, grpc.StatusCode.NOT_FOUND, self.alice.stub.UnregisterRegion,
                  pb.UnregisterRegionRequest(region=info.region), metadata=self.alice.metadata)
        # Descriptors that could be truncated under the server are refused.
        with tempfile.TemporaryFile() as f:
            f.truncate(4096)
            with self.assertRaisesRegex(RuntimeError, "sealable memfd|shrinking"):
                self.raw_register(f.fileno())
        unsealable = os.memfd_create("u")  # No MFD_ALLOW_SEALING: sealed against everything.
        os.ftruncate(unsealable, 4096)
        with self.assertRaisesRegex(RuntimeError, "shrinking"):
            self.raw_register(unsealable)
        os.close(unsealable)
        empty = os.memfd_create("e", os.MFD_ALLOW_SEALING)
        with self.assertRaisesRegex(RuntimeError, "empty"):
            self.raw_register(empty)
        os.close(empty)
        # Malformed messages get an error reply; the connection carries on.
        s = self.alice._shm().sock
        s.send(b"hello")
        self.assertTrue(s.recv(512).startswith(b"error unknown message"))
        s.send(b"register")
        self.assertTrue(s.recv(512).startswith(b"error"))
        a, b = os.memfd_create("a", os.MFD_ALLOW_SEALING), os.memfd_create("b", 0)
        socket.send_fds(s, [b"register"], [a, b])
        self.assertIn(b"exactly one", s.recv(512))
        os.close(a)
        os.close(b)
        rpc_error(self, grpc.StatusCode.NOT_FOUND, self.alice.stub.RegisterRegion,
                  pb.RegisterRegionRequest(ticket="0" * 32), metadata=self.alice.metadata)

    def test_shrinking_is_refused_and_unmapping_harmless(self):
        fd = os.memfd_create("s", os.MFD_ALLOW_SEALING)
        os.ftruncate(fd, 1 << 16)
        mm = mmap.mmap(fd, 1 << 16)
        ticket = self.raw_register(fd)
        info = self.alice.stub.RegisterRegion(pb.RegisterRegionRequest(ticket=ticket),
                                              metadata=self.alice.metadata)
        x = np.frombuffer(mm, np.float32)
        x[:] = self.rng.standard_normal(x.size)
        expect = -x.copy()
        # The server sealed the file: the client can no longer shrink it.
        self.assertTrue(fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_SHRINK)
        with self.assertRaises(PermissionError):
            os.ftruncate(fd, 4096)
        t = pb.Tensor(dtype=pb.float32, shape=[x.size], region=info.region,
                      storage_bytes=x.nbytes)
        del x
        mm.close()  # Unmapped here; the server's mapping stays whole.
        os.close(fd)
        reply = self.alice.stub.Compute(pb.ComputeRequest(op="neg", inputs=[t]),
                                        metadata=self.alice.metadata)
        np.testing.assert_array_equal(tcc.from_tensor(reply.output), expect)
        self.alice.stub.UnregisterRegion(pb.UnregisterRegionRequest(region=info.region),
                                         metadata=self.alice.metadata)

    def test_write_sealed_region_is_input_only(self):
        fd = os.memfd_create("ro", os.MFD_ALLOW_SEALING)
        data = np.arange(256, dtype=np.float32)
        os.write(fd, data.tobytes())
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE)
        ticket = self.raw_register(fd)
        os.close(fd)
        info = self.alice.stub.RegisterRegion(pb.RegisterRegionRequest(ticket=ticket),
                                              metadata=self.alice.metadata)
        self.assertFalse(info.writable)
        t = pb.Tensor(dtype=pb.float32, shape=[256], region=info.region, storage_bytes=1024)
        reply = self.alice.stub.Compute(pb.ComputeRequest(op="square", inputs=[t]),
                                        metadata=self.alice.metadata)
        np.testing.assert_array_equal(tcc.from_tensor(reply.output), data * data)
        d = rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT, self.alice.stub.Compute,
                      pb.ComputeRequest(op="square", inputs=[t], output_region=info.region),
                      metadata=self.alice.metadata)
        self.assertIn("sealed against writing", d)
        self.alice.stub.UnregisterRegion(pb.UnregisterRegionRequest(region=info.region),
                                         metadata=self.alice.metadata)

    def test_regions_end_with_their_client(self):
        before = self.info()
        child = subprocess.Popen([sys.executable, "-c", f"""
import sys, time, numpy as np, tensorcompute_client as tcc
c = tcc.Client({self.target!r}, token={BOB!r})
a = c.shared_array((1 << 20,), np.float32)
b = c.region(3 << 20)
print("ready", flush=True)
time.sleep(60)
"""], stdout=subprocess.PIPE, text=True)
        self.assertEqual(child.stdout.readline().strip(), "ready")
        during = self.info()
        self.assertEqual(during.regions, before.regions + 2)
        self.assertEqual(during.region_bytes, before.region_bytes + (4 << 20) + (3 << 20))
        child.kill()
        child.wait()
        child.stdout.close()
        self.assertTrue(wait_for(lambda: self.info().region_bytes == before.region_bytes),
                        self.info())
        self.assertEqual(self.info().regions, before.regions)
        # And the server is well.
        np.testing.assert_array_equal(self.alice.compute("neg", np.ones(3, np.float32)),
                                      -np.ones(3, np.float32))

    def test_empty_output_at_the_regions_end(self):
        # An empty result written at the very end of a region writes nothing there.
        r = self.alice.region(4096)
        empty = pb.Tensor(dtype=pb.float32, shape=[0])
        for offset in (0, 4096):
            reply = self.alice.stub.Compute(
                pb.ComputeRequest(op="neg", inputs=[empty], output_region=r.id,
                                  output_region_offset=offset),
                metadata=self.alice.metadata)
            self.assertEqual(list(reply.output.shape), [0])
        np.testing.assert_array_equal(self.alice.compute("neg", np.ones(3, np.float32)),
                                      -np.ones(3, np.float32))
        r.close()

    def test_dropped_arrays_unregister_their_region(self):
        before = self.info().region_bytes
        a = self.alice.shared_array((1000,), np.int64)
        view = a[::2]
        del a
        self.assertEqual(self.info().region_bytes, before + 8000)
        del view
        self.assertTrue(wait_for(lambda: self.info().region_bytes == before))

    def test_quota(self):
        quota = self.info().limits.region_quota_bytes
        fd = os.memfd_create("big", os.MFD_ALLOW_SEALING)
        os.ftruncate(fd, quota + 1)  # Sparse: nothing is allocated.
        with self.assertRaisesRegex(RuntimeError, "quota"):
            self.raw_register(fd)
        os.close(fd)


def vm_size(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize")


def sparse_memfd(size):
    fd = os.memfd_create("sparse", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    return fd


def raw_connection(address):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(15)
    s.connect("\0" + address[1:] if address.startswith("@") else address)
    return s


def ask(sock, fd=None, text=b"register"):
    try:
        if fd is None:
            sock.send(text)
        else:
            socket.send_fds(sock, [text], [fd])
    except BrokenPipeError:
        pass  # Refused: the server's one reply is still there to read.
    return sock.recv(512).decode()


class LocalCallerLimitsTest(unittest.TestCase):
    """What one local process can do to the server and to the other callers through the region
    socket, with the limits made small: tickets map nothing, every region counts against the
    server-wide limit, connections are bounded per process and per server with room made for
    new callers, idle connections close."""
    LIMIT = 256 << 20
    PER_PROCESS = 6

    @classmethod
    def setUpClass(cls):
        cls.proc, cls.target = start_server(
            ARGS.server, f"--backend={ARGS.backend}", f"--shared_memory_limit_bytes={cls.LIMIT}",
            f"--region_quota_bytes={4 * cls.LIMIT}", f"--region_max_connections={2 * cls.PER_PROCESS}",
            f"--region_connections_per_process={cls.PER_PROCESS}", "--region_idle_seconds=2")
        cls.client = tcc.Client(cls.target)
        cls.address = cls.client.server_info().region_socket

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        stop_server(cls.proc)

    def healthy(self):
        np.testing.assert_array_equal(self.client.compute("neg", np.ones(5, np.float32)),
                                      -np.ones(5, np.float32))

    def test_limits_are_reported(self):
        info = self.client.server_info()
        self.assertEqual(info.limits.shared_memory_limit_bytes, self.LIMIT)
        self.assertEqual(info.limits.region_quota_bytes, 4 * self.LIMIT)

    def test_unclaimed_tickets_map_nothing_and_claims_stay_within_the_limit(self):
        before = vm_size(self.proc.pid)
        fd = sparse_memfd(200 << 20)
        socks = [raw_connection(self.address) for _ in range(4)]
        tickets = []
        try:
            # 64 tickets for 12.5 GiB of sparse memory: nothing mapped until a claim.
            for s in socks:
                for _ in range(16):
                    reply = ask(s, fd)
                    self.assertTrue(reply.startswith("ticket "), reply)
                    tickets.append(reply.split()[1])
                self.assertIn("not yet claimed", ask(s, fd))
            self.assertLess(vm_size(self.proc.pid) - before, 64 << 20)
            # One claim fits the limit; a second would pass it.
            info = self.client.stub.RegisterRegion(pb.RegisterRegionRequest(ticket=tickets[0]))
            self.assertEqual(info.bytes, 200 << 20)
            self.assertEqual(self.client.server_info().shared_memory_bytes, 200 << 20)
            d = rpc_error(self, grpc.StatusCode.RESOURCE_EXHAUSTED,
                          self.client.stub.RegisterRegion,
                          pb.RegisterRegionRequest(ticket=tickets[1]))
            self.assertIn("limit", d)
            # A memfd larger than the limit gets no ticket at all.
            big = sparse_memfd(self.LIMIT + 1)
            self.assertIn("exceeds", ask(socks[0], big))
            os.close(big)
            self.healthy()
            self.client.stub.UnregisterRegion(pb.UnregisterRegionRequest(region=info.region))
            self.assertEqual(self.client.server_info().shared_memory_bytes, 0)
        finally:
            for s in socks:
                s.close()
            os.close(fd)
        self.assertTrue(wait_for(lambda: vm_size(self.proc.pid) - before < 64 << 20))

    def test_one_process_cannot_lock_others_out(self):
        socks = []
        try:
            # This process gets its connections (the client's own among them); the next one is
            # told why it is refused.
            refused = ""
            for _ in range(self.PER_PROCESS + 1):
                socks.append(raw_connection(self.address))
                reply = ask(socks[-1], text=b"hello")
                if not reply.startswith("error unknown"):
                    refused = reply
                    break
            self.assertIn(f"this process has {self.PER_PROCESS} connections", refused)
            self.assertLessEqual(len(socks), self.PER_PROCESS + 1)
            # Another process fills the rest of the socket with idle connections...
            abstract = "\0" + self.address[1:]
            child = subprocess.Popen([sys.executable, "-c", f"""
import socket, sys, time
socks = []
for _ in range({self.PER_PROCESS}):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect({abstract!r})
    s.send(b"hello"); s.recv(512)
    socks.append(s)
print("ready", flush=True)
time.sleep(60)
"""], stdout=subprocess.PIPE, text=True)
            self.assertEqual(child.stdout.readline().strip(), "ready")
            # ...and a new caller still registers: the longest idle connection makes room.
            other = subprocess.run([sys.executable, "-c", f"""
import numpy as np, tensorcompute_client as tcc
c = tcc.Client({self.target!r})
x = c.shared_array((1000,), np.float32)
x[:] = 2
assert (c.compute("mul", x, x) == 4).all()
print("registered")
"""], capture_output=True, text=True, timeout=60)
            self.assertIn("registered", other.stdout, other.stderr)
            child.kill()
            child.wait()
            child.stdout.close()
        finally:
            for s in socks:
                s.close()
        self.healthy()

    def test_idle_connections_close_and_clients_reconnect(self):
        s = raw_connection(self.address)
        self.assertTrue(ask(s, text=b"hello").startswith("error unknown"))
        x = self.client.shared_array((100,), np.float32)
        del x  # The client's connection holds nothing again.
        time.sleep(4.5)
        self.assertEqual(s.recv(512), b"")  # Closed by the server.
        s.close()
        # The client's own idle connection was closed too: it connects again by itself.
        y = self.client.shared_array((100,), np.float32)
        y[:] = 3
        np.testing.assert_array_equal(self.client.compute("add", y, y), 6 * np.ones(100))

    def test_a_connection_holding_a_region_stays_open(self):
        x = self.client.shared_array((100,), np.float32)
        time.sleep(4.5)
        x[:] = 1
        np.testing.assert_array_equal(self.client.compute("neg", x), -np.ones(100))

    def test_error_messages_quote_caller_strings_briefly(self):
        d = rpc_error(self, grpc.StatusCode.NOT_FOUND, self.client.stub.UnregisterRegion,
                      pb.UnregisterRegionRequest(region="r" * 65536))
        self.assertLess(len(d), 512)
        d = rpc_error(self, grpc.StatusCode.NOT_FOUND, self.client.stub.Compute,
                      pb.ComputeRequest(op="neg", inputs=[pb.Tensor(
                          dtype=pb.float32, shape=[1], region="z" * 65536, storage_bytes=4)]))
        self.assertLess(len(d), 512)

    def test_descriptors_of_dropped_messages_are_closed(self):
        def server_fds():
            return len(os.listdir(f"/proc/{self.proc.pid}/fd"))
        before = server_fds()
        fd = sparse_memfd(4096)
        for text in (b"", b"x" * 1000):  # An empty message ends the connection; a long one
            for _ in range(3):           # is refused: neither keeps the descriptor.
                s = raw_connection(self.address)
                socket.send_fds(s, [text], [fd, fd, fd])
                if text:
                    self.assertIn("too long", s.recv(512).decode())
                s.close()
        os.close(fd)
        self.assertTrue(wait_for(lambda: server_fds() <= before), (server_fds(), before))

    def test_read_only_memfd_is_refused_by_name(self):
        fd = sparse_memfd(4096)
        ro = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)
        s = raw_connection(self.address)
        try:
            self.assertIn("read-only", ask(s, ro))
            # Sealed against shrinking by its owner first, a read-only one is an input region.
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
            reply = ask(s, ro)
            self.assertTrue(reply.startswith("ticket "), reply)
            info = self.client.stub.RegisterRegion(
                pb.RegisterRegionRequest(ticket=reply.split()[1]))
            self.assertFalse(info.writable)
        finally:
            s.close()
            os.close(ro)
            os.close(fd)


class RegionsOffTest(unittest.TestCase):
    def test_off_falls_back_to_the_socket(self):
        proc, target = start_server(ARGS.server, "--region_socket=off",
                                    f"--backend={ARGS.backend}")
        try:
            c = tcc.Client(target)
            self.assertEqual(c.server_info().region_socket, "")
            self.assertFalse(c.shared_memory_available())
            a = np.random.default_rng().standard_normal((600, 500)).astype(np.float32)
            np.testing.assert_array_equal(c.compute("add", a, a), a + a)
            with self.assertRaisesRegex(RuntimeError, "regions off"):
                c.shared_array((4,))
            rpc_error(self, grpc.StatusCode.FAILED_PRECONDITION, c.stub.Compute,
                      pb.ComputeRequest(op="neg", inputs=[pb.Tensor(
                          dtype=pb.float32, shape=[1], region="0" * 32, storage_bytes=4)]))
            c.close()
        finally:
            self.assertEqual(stop_server(proc), 0)

    def test_unix_socket_target(self):
        path = tempfile.mktemp(prefix="tc-", suffix=".sock")
        proc, _ = start_server(ARGS.server, f"--unix_socket={path}", f"--backend={ARGS.backend}")
        try:
            c = tcc.Client(f"unix://{path}")
            self.assertTrue(c.shared_memory_available())
            x = c.shared_array((1000,), np.float32)
            x[:] = np.arange(1000)
            np.testing.assert_array_equal(c.compute("mul", x, x), x * x)
            c.close()
        finally:
            self.assertEqual(stop_server(proc), 0)
        self.assertFalse(os.path.exists(path))

    def test_remote_targets_do_not_try(self):
        c = tcc.Client("203.0.113.1:50051", shared_memory=None)
        self.assertFalse(c.shared_memory_available())
        c.close()
        for local in ["127.0.0.1:1", "localhost:1", "[::1]:1", "unix:///run/tc.sock",
                      "ipv4:127.0.0.1:1"]:
            self.assertTrue(tcc.shm.is_local_target(local), local)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--backend", default="cpu", help="cpu, or cuda on a GPU machine")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)
