"""A mixed embedding workload with a long tail, for a model directory's tokenizer: the sample workload's 1,000
texts (about 100 tokens on average) plus 40 documents of 600-1,500 tokens made by joining sample texts, so the p99
is past 700 tokens and more than 20 texts are over 512. Usage: long_tail_workload.py MODEL_DIR OUT.jsonl"""

import json
import random
import sys
from importlib import resources

import numpy as np
from transformers import AutoTokenizer


def main(model: str, out: str, long_docs: int = 40, seed: int = 0) -> None:
    lines = resources.files("infertune").joinpath("data/sample_embeddings.jsonl").read_text().splitlines()
    texts = [json.loads(x)["input"] for x in lines]
    tok = AutoTokenizer.from_pretrained(model)
    rng = random.Random(seed)
    for _ in range(long_docs):
        want, doc = rng.randint(600, 1500), []
        while len(tok(" ".join(doc))["input_ids"]) < want:
            doc.append(rng.choice(texts))
        texts.append(" ".join(doc))
    rng.shuffle(texts)
    lens = np.array([len(tok(t)["input_ids"]) for t in texts])
    with open(out, "w") as f:
        f.writelines(json.dumps({"input": t}) + "\n" for t in texts)
    print(f"workload: {len(texts)} texts, mean {lens.mean():.0f} tokens, p50 {np.percentile(lens, 50):.0f}, "
          f"p99 {np.percentile(lens, 99):.0f}, max {lens.max()}, over 512: {(lens > 512).sum()}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
