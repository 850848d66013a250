"""One training step of a tiny causal transformer with flashattn's attention, against PyTorch SDPA.

Two copies of the same model, one calling flash_attn_qkvpacked_func and one calling
torch.nn.functional.scaled_dot_product_attention, take one SGD step on the same tokens; their losses
(before and after the step) and gradients must agree.

    python examples/train_step.py                          # CPU, float32
    python examples/train_step.py --device cuda --dtype bfloat16 --compile
"""
import argparse
import copy
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from flashattn import flash_attn_qkvpacked_func


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention and an MLP, each with a residual."""

    def __init__(self, dim, heads, attention="flashattn"):
        super().__init__()
        self.heads, self.attention = heads, attention
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, s, dim = x.shape
        qkv = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, dim // self.heads)
        if self.attention == "flashattn":
            o = flash_attn_qkvpacked_func(qkv, causal=True)                  # [b, s, heads, hdim]
        else:
            q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))            # SDPA takes [b, heads, s, hdim]
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)
        x = x + self.proj(o.reshape(b, s, dim))
        return x + self.mlp(self.norm2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab=256, dim=128, heads=4, layers=2, attention="flashattn"):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, attention) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def use_attention(self, attention):
        for block in self.blocks:
            block.attention = attention
        return self

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def lm_loss(model, tokens):
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())


def train_step(model, tokens, lr, run=None):
    """One SGD step; returns (loss before, gradients, loss after). `run` calls the model (compiled or not)."""
    run = model if run is None else run
    model.zero_grad(set_to_none=True)
    loss = lm_loss(run, tokens)
    loss.backward()
    grads = {name: p.grad.detach().float().clone() for name, p in model.named_parameters()}
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad
        loss_after = lm_loss(run, tokens)
    return loss.detach(), grads, loss_after


def compare(device="cpu", dtype=torch.float32, batch=4, seqlen=64, compile=False, seed=0):
    """Runs the step with flashattn and with SDPA; returns the losses and the largest gradient gap."""
    torch.manual_seed(seed)
    ours = TinyLM().to(device=device, dtype=dtype)
    theirs = copy.deepcopy(ours).use_attention("sdpa")
    tokens = torch.randint(0, 256, (batch, seqlen + 1), device=device)
    run = torch.compile(ours, fullgraph=True) if compile else ours
    loss, grads, loss_after = train_step(ours, tokens, lr=0.5, run=run)
    loss_sdpa, grads_sdpa, loss_after_sdpa = train_step(theirs, tokens, lr=0.5)
    grad_gap = max(((grads[n] - grads_sdpa[n]).abs().max() / grads_sdpa[n].abs().max().clamp_min(1e-12)).item()
                   for n in grads)
    return dict(loss=loss.item(), loss_sdpa=loss_sdpa.item(), loss_after=loss_after.item(),
                loss_after_sdpa=loss_after_sdpa.item(), max_relative_grad_gap=grad_gap)


# Agreement expected between two correct attentions, per dtype (relative).
TOLERANCE = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 3e-2}


def agrees(result, dtype):
    tol = TOLERANCE[dtype]
    close = lambda a, b: abs(a - b) <= tol * max(1.0, abs(b))  # noqa: E731
    return (close(result["loss"], result["loss_sdpa"]) and close(result["loss_after"], result["loss_after_sdpa"])
            and result["max_relative_grad_gap"] <= 10 * tol)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--compile", action="store_true", help="torch.compile(fullgraph=True) our model")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    result = compare(args.device, dtype, compile=args.compile)
    print(f"loss  flashattn {result['loss']:.6f}  sdpa {result['loss_sdpa']:.6f}")
    print(f"after one SGD step  flashattn {result['loss_after']:.6f}  sdpa {result['loss_after_sdpa']:.6f}")
    print(f"largest relative gradient gap {result['max_relative_grad_gap']:.2e}")
    ok = agrees(result, dtype)
    print("matches SDPA" if ok else "DOES NOT match SDPA")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
