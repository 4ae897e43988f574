"""A tiny training run with nothing to install: logistic regression on synthetic data.

It shows what a Trainyard job sees: it logs its progress, reports its loss and accuracy each
epoch as training metrics (JSON lines in $TRAINYARD_METRICS_FILE: `trainyard metrics JOB_ID`),
and writes its model and last metrics to $TRAINYARD_OUTPUT_DIR, which the worker uploads while
the job runs and once more at the end.
"""
import json
import math
import os
import random
import time

random.seed(7)
N, D, EPOCHS, LR = 2000, 8, int(os.environ.get("EPOCHS", "20")), 0.5
true_w = [random.uniform(-2, 2) for _ in range(D)]
X = [[random.gauss(0, 1) for _ in range(D)] for _ in range(N)]
y = [1.0 if sum(w * x for w, x in zip(true_w, row)) > 0 else 0.0 for row in X]

out = os.environ.get("TRAINYARD_OUTPUT_DIR", "outputs")
metrics_file = os.environ.get("TRAINYARD_METRICS_FILE", os.path.join(out, "metrics.jsonl"))
os.makedirs(out, exist_ok=True)
w = [0.0] * D
print(f"job {os.environ.get('TRAINYARD_JOB_ID', '?')} training on {N} samples, {D} features", flush=True)
for epoch in range(1, EPOCHS + 1):
    grad = [0.0] * D
    loss = 0.0
    correct = 0
    for row, target in zip(X, y):
        z = sum(wi * xi for wi, xi in zip(w, row))
        p = 1 / (1 + math.exp(-z))
        loss -= target * math.log(p + 1e-12) + (1 - target) * math.log(1 - p + 1e-12)
        correct += (p > 0.5) == (target == 1.0)
        for i in range(D):
            grad[i] += (p - target) * row[i]
    w = [wi - LR * g / N for wi, g in zip(w, grad)]
    acc = correct / N
    print(f"epoch {epoch:3d}  loss {loss / N:.4f}  accuracy {acc:.3f}", flush=True)
    metrics = {"epoch": epoch, "loss": loss / N, "accuracy": acc}
    with open(metrics_file, "a") as f:
        f.write(json.dumps(metrics) + "\n")
    with open(os.path.join(out, "metrics.json"), "w") as f:
        json.dump(metrics, f)
    time.sleep(0.05)

with open(os.path.join(out, "model.json"), "w") as f:
    json.dump({"weights": w}, f)
print("done", flush=True)
