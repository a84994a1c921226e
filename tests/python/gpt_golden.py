"""nanoGPT's GPT (bench/nanogpt_reference.py) for the C++ GPT's tests.

usage: gpt_golden.py init OUT.pt SEED VOCAB BLOCK LAYERS HEADS WIDTH
           torch.manual_seed(SEED); GPT(...).state_dict(), plus "logits" of a fixed input
       gpt_golden.py load IN.pt OUT.pt HEADS
           loads IN.pt (the C++ model's export) into the Python GPT, strictly; OUT.pt gets
           {"logits": ...} of the same fixed input
The fixed input: tokens (arange(2·BLOCK) · 7) % VOCAB, as 2 rows of BLOCK.
"""
import sys
from types import SimpleNamespace

import torch

sys.path.insert(0, __file__.rsplit("/", 3)[0] + "/bench")
from nanogpt_reference import GPT  # noqa: E402


def fixed_input(vocab, block):
    return ((torch.arange(2 * block) * 7) % vocab).view(2, block)


def logits_of(model, cfg):
    with torch.no_grad():
        return model(fixed_input(cfg.vocab_size, cfg.block_size))


if sys.argv[1] == "init":
    out, seed, vocab, block, layers, heads, width = sys.argv[2], *map(int, sys.argv[3:])
    cfg = SimpleNamespace(vocab_size=vocab, block_size=block, n_layer=layers, n_head=heads,
                          n_embd=width, bias=True, dropout=0.0)
    torch.manual_seed(seed)
    model = GPT(cfg)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["logits"] = logits_of(model, cfg)
    torch.save(state, out)
else:
    path, out, heads = sys.argv[2], sys.argv[3], int(sys.argv[4])
    state = torch.load(path)
    layers = len({k.split(".")[2] for k in state if k.startswith("transformer.h.")})
    vocab, width = state["transformer.wte.weight"].shape
    block = state["transformer.wpe.weight"].shape[0]
    cfg = SimpleNamespace(vocab_size=vocab, block_size=block, n_layer=layers, n_head=heads,
                          n_embd=width, bias=True, dropout=0.0)
    model = GPT(cfg)
    model.load_state_dict(state, strict=True)
    torch.save({"logits": logits_of(model, cfg)}, out)
