#!/usr/bin/env node
// Calls tensorcompute from Node.js: ServerInfo, a broadcasting add, a strided (transposed)
// input, and a resident tensor uploaded in chunks, computed on and downloaded.
//   npm install && node example.js 127.0.0.1:50051
'use strict';
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const PROTO = path.join(__dirname, '..', '..', 'proto', 'tensorcompute', 'v1', 'tensor_service.proto');
const def = protoLoader.loadSync(PROTO, { keepCase: false, longs: Number, enums: String, defaults: true });
const { TensorService } = grpc.loadPackageDefinition(def).tensorcompute.v1;

const target = process.argv[2] || '127.0.0.1:50051';
const client = new TensorService(target, grpc.credentials.createInsecure());
const deadline = () => new Date(Date.now() + 10000);

// A float32 tensor from numbers; strides and offset in elements (empty strides: C order).
function float32(shape, values, strides = [], offset = 0) {
  return { dtype: 'float32', shape, strides, offset, data: Buffer.from(new Float32Array(values).buffer) };
}

// Values of a float32 reply, following its strides.
function values(t) {
  const out = [];
  const walk = (dim, at) => {
    if (dim === t.shape.length) { out.push(t.data.readFloatLE(at * 4)); return; }
    for (let i = 0; i < t.shape[dim]; i++) walk(dim + 1, at + i * t.strides[dim]);
  };
  walk(0, t.offset);
  return out;
}

const call = (method, request) => new Promise((resolve, reject) =>
  client[method](request, { deadline: deadline() }, (err, reply) => (err ? reject(err) : resolve(reply))));

function upload(tensor, chunkBytes) {
  return new Promise((resolve, reject) => {
    const stream = client.upload({ deadline: deadline() }, (err, reply) => (err ? reject(err) : resolve(reply)));
    const { data, ...meta } = tensor;
    stream.write({ header: { tensor: { ...meta, storageBytes: data.length } } });
    for (let at = 0; at < data.length; at += chunkBytes) {
      stream.write({ chunk: { offset: at, data: data.subarray(at, at + chunkBytes) } });
    }
    stream.end();
  });
}

function download(handle) {
  return new Promise((resolve, reject) => {
    let header = null;
    const parts = [];
    const stream = client.download({ handle }, { deadline: deadline() });
    stream.on('data', (m) => { if (m.header) header = m.header; else parts.push(m.chunk.data); });
    stream.on('error', reject);
    stream.on('end', () => resolve({ ...header, data: Buffer.concat(parts) }));
  });
}

async function main() {
  const info = await call('serverInfo', {});
  console.log(`server ${info.version} (${info.build}), backend ${info.backend}, ${info.devices.length} device(s)`);

  // [2,3] + [3] with alpha = 2.
  const sum = await call('compute', {
    op: 'add',
    inputs: [float32([2, 3], [1, 2, 3, 4, 5, 6]), float32([3], [10, 20, 30])],
    attributes: { alpha: { floatValue: 2 } },
  });
  console.log(`add: shape [${sum.output.shape}] values [${values(sum.output)}]`);

  // The transpose of a 2x3 matrix, sent as its storage with strides [1, 3].
  const neg = await call('compute', { op: 'neg', inputs: [float32([3, 2], [1, 2, 3, 4, 5, 6], [1, 3])] });
  console.log(`neg of transpose: shape [${neg.output.shape}] values [${values(neg.output)}]`);

  // Resident: upload in 8-byte chunks, square on the server, keep the result there, download.
  const up = await upload(float32([4], [1, 2, 3, 4]), 8);
  const kept = await call('compute', {
    op: 'mul', inputs: [{ handle: up.tensor.handle }, { handle: up.tensor.handle }], keepOutputResident: true,
  });
  const back = await download(kept.output.handle);
  console.log(`resident square: [${values(back)}]`);
  const released = await call('release', { handles: [up.tensor.handle, kept.output.handle] });
  console.log(`released ${released.releasedBytes} bytes`);

  try {
    await call('compute', { op: 'no_such_op', inputs: [] });
  } catch (err) {
    console.log(`error: ${grpc.status[err.code]}`);
  }
  client.close();
}

main().catch((err) => { console.error(err); process.exit(1); });
