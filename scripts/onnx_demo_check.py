#!/usr/bin/env python3
"""The last step of `make demo`: the exported ONNX model, run by onnxruntime
on the test set that `yoke predict` preprocessed, must reach the test
accuracy Yoke reports, to the fourth digit.

  onnx_demo_check.py MODEL.onnx INPUTS.f32 PREDICTIONS.csv YOKE_ACCURACY

INPUTS.f32 and PREDICTIONS.csv are `yoke predict --inputs` and `-o` (the
CSV's second column is each example's label). Exit 0 when the accuracies
agree, 1 when they do not, 77 when onnxruntime is not installed.
"""
import sys

try:
    import numpy as np
    import onnxruntime as ort
except ImportError as e:
    print(f"demo: onnxruntime is not installed here ({e}): the ONNX check is skipped")
    sys.exit(77)


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__.split("\n\n")[1])
    model, inputs, predictions, yoke_accuracy = sys.argv[1:]
    labels = []
    with open(predictions) as f:
        for line in f:
            fields = line.strip().split(",")
            if len(fields) > 1 and fields[1].lstrip("-").isdigit():
                labels.append(int(fields[1]))
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    shape = [d if isinstance(d, int) else -1 for d in session.get_inputs()[0].shape]
    x = np.fromfile(inputs, dtype="<f4").reshape([-1] + shape[1:])
    if len(x) != len(labels):
        sys.exit(f"demo: {len(x)} inputs but {len(labels)} predictions")
    name = session.get_inputs()[0].name
    predicted = np.concatenate([session.run(None, {name: x[i:i + 500]})[0].argmax(axis=1)
                                for i in range(0, len(x), 500)])
    y = np.array(labels)
    labelled = y >= 0
    accuracy = float((predicted[labelled] == y[labelled]).mean())
    want = float(yoke_accuracy)
    same = round(accuracy, 4) == round(want, 4)
    print(f"demo: onnxruntime {ort.__version__} on the exported model: test accuracy "
          f"{accuracy:.4f} on {int(labelled.sum())} images; Yoke reported {want:.4f}"
          f"{'' if same else ': THEY DIFFER'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
