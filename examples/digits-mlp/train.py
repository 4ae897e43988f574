"""A PyTorch MLP on scikit-learn's digits (8x8 images of handwritten digits, bundled with it).

It writes a checkpoint after every epoch and one JSON line of metrics per epoch into
$TRAINYARD_OUTPUT_DIR, and reports the same line as training metrics ($TRAINYARD_METRICS_FILE). Run again after a failure (TRAINYARD_RESUMED=1, the checkpoint restored),
it carries on from the epoch after the last one it saved instead of starting over.
"""
import json
import os
import time

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

EPOCHS = int(os.environ.get("EPOCHS", "30"))
# Seconds to rest after each epoch: a short run to watch, or to stop half way.
PAUSE = float(os.environ.get("EPOCH_PAUSE", "0"))
OUT = os.environ.get("TRAINYARD_OUTPUT_DIR", "outputs")
CHECKPOINT = os.path.join(OUT, "checkpoint.pt")
METRICS = os.path.join(OUT, "metrics.jsonl")
REPORTED = os.environ.get("TRAINYARD_METRICS_FILE")

torch.manual_seed(0)
torch.set_num_threads(1)
os.makedirs(OUT, exist_ok=True)

digits = load_digits()
x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
y = torch.tensor(digits.target, dtype=torch.long)
train_x, test_x, train_y, test_y = train_test_split(x, y, test_size=0.25, random_state=0)

model = torch.nn.Sequential(
    torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
loss_fn = torch.nn.CrossEntropyLoss()

start = 1
if os.environ.get("TRAINYARD_RESUMED") == "1" and os.path.exists(CHECKPOINT):
    saved = torch.load(CHECKPOINT)
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    start = saved["epoch"] + 1
    print(f"resumed from the checkpoint of epoch {saved['epoch']}", flush=True)

for epoch in range(start, EPOCHS + 1):
    model.train()
    for batch in torch.randperm(len(train_x)).split(64):
        optimizer.zero_grad()
        loss = loss_fn(model(train_x[batch]), train_y[batch])
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        accuracy = (model(test_x).argmax(1) == test_y).float().mean().item()
    print(f"epoch {epoch:3d}  loss {loss.item():.4f}  accuracy {accuracy:.3f}", flush=True)
    line = json.dumps({"epoch": epoch, "loss": loss.item(), "accuracy": accuracy}) + "\n"
    for path in [METRICS, REPORTED] if REPORTED else [METRICS]:
        with open(path, "a") as f:
            f.write(line)
    # Written whole, then moved into place: a checkpoint is never half written.
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, CHECKPOINT + ".tmp")
    os.replace(CHECKPOINT + ".tmp", CHECKPOINT)
    time.sleep(PAUSE)

print(f"done: accuracy {accuracy:.3f}", flush=True)
