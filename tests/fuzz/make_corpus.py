#!/usr/bin/python3
"""Writes the seed inputs of the fuzz targets that are not HDF5 files into tests/fuzz/corpus/.

The HDF5 seeds (dataset_file, checkpoint, metric_log, time_model, bench_results) are small files
the tools wrote, listed in tests/fuzz/corpus/README.md. Run from anywhere:
/usr/bin/python3 tests/fuzz/make_corpus.py
"""
import gzip
import io
import os
import struct
import tarfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    os.makedirs(os.path.join(ROOT, target), exist_ok=True)
    with open(os.path.join(ROOT, target, name), "wb") as f:
        f.write(data)


def idx(dims, data):
    return bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + bytes(data)


def idx_pair(images, labels):
    return struct.pack(">H", len(images)) + images + labels


# IDX: 3 images of 4x4 and their labels; a 4-D (N, C, H, W) file; a label out of range.
images = idx([3, 4, 4], range(48))
labels = idx([3], [1, 9, 0])
put("idx", "mnist_like", idx_pair(images, labels))
put("idx", "nchw", idx_pair(idx([2, 1, 2, 2], range(8)), idx([2], [3, 4])))
put("idx", "label_out_of_range", idx_pair(idx([1, 2, 2], range(4)), idx([1], [10])))

# CIFAR: two CIFAR-10 records, one CIFAR-100 record, a class-name list.
record10 = bytes([3]) + bytes(i % 256 for i in range(3072))
put("cifar", "cifar10", bytes([0]) + record10 + bytes([7]) + bytes(3072))
put("cifar", "cifar100", bytes([1]) + bytes([4, 42]) + bytes(i % 251 for i in range(3072)))
put("cifar", "names", bytes([2]) + b"airplane\nautomobile\n\nbird\r\n")

# gzip: one member, two members, and an empty stream.
put("gzip", "idx_gz", gzip.compress(images, mtime=0))
put("gzip", "two_members", gzip.compress(b"abc", mtime=0) + gzip.compress(labels, mtime=0))
put("gzip", "empty", gzip.compress(b"", mtime=0))

# tar: a CIFAR-10-like archive (gzip-compressed and plain).
def tar(members, mode):
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode=mode, format=tarfile.USTAR_FORMAT) as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue()

members = [("cifar-10-batches-bin/data_batch_1.bin", record10),
           ("cifar-10-batches-bin/batches.meta.txt", b"airplane\nautomobile\n")]
put("tar", "cifar_tgz", gzip.compress(tar(members, "w"), mtime=0))
put("tar", "cifar_tar", tar(members, "w"))

# Option values: the first byte picks the parser (fuzz_options.cpp).
options = [
    (0, "niagara"), (0, "cedar"), (0, "0:0:0.4,0:0.4:0.3,2:0.3:0.2,5:0.3:0.1"), (0, "1e300:1:1"),
    (1, "0.001,0.01"), (1, "0=0.002,0.02 1-3=0.001,0.01"), (1, "2=1e-3,0"),
    (2, "25e-6,1e-10"), (2, "0,0"),
    (3, "3=2"), (3, "1=1.5,2=4"),
    (4, "0.00056607,0.014041204"),
    (5, "16,32,64"), (5, "1"),
    (6, "8"), (6, "1K"), (6, "64M"), (6, "1G"),
    (7, "30min"), (7, "1.5h"), (7, "250ms"), (7, "12"),
    (8, "100"), (8, "-1"), (8, "99999999999999999999"),
    (9, "0.1"), (9, "nan"), (9, "1e300"), (9, "inf"),
    (10, "d41d8cd98f00b204e9800998ecf8427e  train-images-idx3-ubyte.gz\n"),
    (11, "1=0.05/0.1"), (11, "0=1e-6/1,3=0.002/0.002"),
    (12, '{"lr": 0.1, "model": "mlp", "milestones": [80, 120], "nested": {"a": true}}'),
]
for number, (selector, text) in enumerate(options):
    put("options", f"{selector:02d}_{number:02d}", bytes([selector]) + text.encode())
