"""Reads a run directory's TensorBoard events with the tensorboard package and prints
{tag: [[step, value], ...]} as JSON (tests/train/test_grpo.cpp compares it with metrics.jsonl)."""
import json
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
acc.Reload()
print(json.dumps({tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}))
