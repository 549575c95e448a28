"""Reference accuracy for tests/e2e/test_train.py: PyTorch trains the same MLP on the same data
with the same hyperparameters as the test's mb-train-fmb run, over several seeds.

    /usr/bin/python3 torch_mlp_fmnist.py > torch_mlp_fmnist.json     (Debian's python3-torch)

Setup (kept identical to the test): Fashion-MNIST from Debian's dataset-fashion-mnist, pixels
normalised as (x/255 - mean)/std with the training set's mean and std; 784-256-10 with a sigmoid
hidden layer and PyTorch's default initialisation (which mbkit's mlp uses too); SGD with momentum
0.9 (TF1 momentum, the same as PyTorch's without dampening), learning rate 0.1 decaying linearly
to 0 over the run (mbkit's --lr-schedule linear: lr (1 - step / total_steps), which also makes
the final accuracy steadier from seed to seed), batch 64, a new shuffle every epoch, the last
partial batch kept, 5 epochs; mean cross-entropy; test accuracy on all 10,000 test images after
the last epoch.
"""
import gzip
import json

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist/"
EPOCHS, BATCH, LR, MOMENTUM = 5, 64, 0.1, 0.9
SEEDS = [1, 2, 3, 4, 5]


def load(images, labels):
    with gzip.open(DATA + images) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784).astype(np.float64)
    with gzip.open(DATA + labels) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
    return x / 255.0, y


def run(seed, train_x, train_y, test_x, test_y):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(784, 256), nn.Sigmoid(), nn.Linear(256, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    generator = torch.Generator().manual_seed(seed)
    steps_per_epoch = (len(train_y) + BATCH - 1) // BATCH
    total_steps, step = EPOCHS * steps_per_epoch, 0
    for _ in range(EPOCHS):
        order = torch.randperm(len(train_y), generator=generator)
        for start in range(0, len(order), BATCH):
            index = order[start:start + BATCH]
            for group in optimizer.param_groups:
                group["lr"] = LR * (1 - step / total_steps)
            step += 1
            optimizer.zero_grad()
            F.cross_entropy(model(train_x[index]), train_y[index]).backward()
            optimizer.step()
    with torch.no_grad():
        return (model(test_x).argmax(1) == test_y).double().mean().item()


def main():
    torch.set_num_threads(1)
    train_x, train_y = load("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz")
    test_x, test_y = load("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
    mean, std = train_x.mean(), train_x.std()
    to_tensor = lambda x: torch.tensor((x - mean) / std, dtype=torch.float32)
    train_x, test_x = to_tensor(train_x), to_tensor(test_x)
    train_y, test_y = torch.tensor(train_y), torch.tensor(test_y)
    accuracies = [run(seed, train_x, train_y, test_x, test_y) for seed in SEEDS]
    print(json.dumps({"torch": torch.__version__, "epochs": EPOCHS, "batch": BATCH, "lr": LR,
                      "lr_schedule": "linear to 0",
                      "momentum": MOMENTUM, "seeds": SEEDS, "accuracy": accuracies,
                      "mean_accuracy": sum(accuracies) / len(accuracies)}, indent=2))


if __name__ == "__main__":
    main()
