"""nanoGPT's model (Karpathy, github.com/karpathy/nanoGPT, model.py) written anew in PyTorch, as the
peer of `normlab train --model gpt` at nanoGPT's CPU shape of shakespeare_char:

  4 layers, n_embd 128, 4 heads, block_size 64, batch 12, vocabulary 65 (the characters of the text),
  dropout 0, bias False: the configuration nanoGPT's README gives for a CPU
  (`python train.py config/train_shakespeare_char.py --device=cpu --compile=False --block_size=64
  --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 --dropout=0.0`).

What nanoGPT's model is, and this one too:
  x = wte[ids] + wpe[0..T-1]
  per block:  x = x + c_proj(attn(ln_1(x)))     c_attn: Linear d -> 3d (q, k, v), c_proj d -> d
              x = x + mlp(ln_2(x))              mlp: c_fc d -> 4d, exact GELU, c_proj 4d -> d
              attn: F.scaled_dot_product_attention(q, k, v, is_causal=True), heads of d / n_head
  ln_f, lm_head: Linear d -> vocab, its weight the same tensor as wte (tied)
  LayerNorm without bias (weight only, eps 1e-5) and every Linear without bias (bias=False).
  Init: Linear and Embedding weights N(0, 0.02), every c_proj weight N(0, 0.02 / sqrt(2 * n_layer)).
  Optimizer (configure_optimizers): AdamW over two groups, the tensors of two or more dims
  (matrices, embeddings) decayed by weight_decay, the others (LayerNorm weights) not.
  shakespeare_char: lr 1e-3, betas (0.9, 0.99), weight_decay 0.1. nanoGPT asks for the fused AdamW
  only on CUDA (its CPU runs take the for-loop one); optimizer() takes the implementation from its
  caller, and torch_baseline.py's --adam auto picks the fused CPU kernel, PyTorch's fastest, which
  can only favour PyTorch.

Needs PyTorch; never needed by normlab's tests.
"""
import math

# nanoGPT's CPU configuration of shakespeare_char (its README).
SHAPE = {"layers": 4, "d_model": 128, "d_hidden": 512, "heads": 4, "vocab": 65, "seq_len": 64, "batch_size": 12}
OPTIMIZER = {"lr": 1e-3, "betas": (0.9, 0.99), "weight_decay": 0.1}


def build(torch, layers, d_model, heads, vocab, seq_len, d_hidden=None):
    """nanoGPT's GPT with bias False and dropout 0, initialised as nanoGPT does (torch's RNG)."""
    nn, F = torch.nn, torch.nn.functional
    d_hidden = d_hidden or 4 * d_model
    if d_model % heads:
        raise ValueError(f"d_model {d_model} is not a multiple of heads {heads}")

    class LayerNorm(nn.Module):
        """LayerNorm with a weight and no bias (nanoGPT's bias=False)."""

        def __init__(self, d):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))

        def forward(self, x):
            return F.layer_norm(x, self.weight.shape, self.weight, None, 1e-5)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(d_model, 3 * d_model, bias=False)
            self.c_proj = nn.Linear(d_model, d_model, bias=False)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.c_attn(x).split(d_model, dim=2)
            q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(d_model, d_hidden, bias=False)
            self.c_proj = nn.Linear(d_hidden, d_model, bias=False)

        def forward(self, x):
            return self.c_proj(F.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.attn, self.ln_2, self.mlp = LayerNorm(d_model), Attention(), LayerNorm(d_model), Mlp()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab, d_model)
            self.wpe = nn.Embedding(seq_len, d_model)
            self.h = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = LayerNorm(d_model)
            self.lm_head = nn.Linear(d_model, vocab, bias=False)
            self.lm_head.weight = self.wte.weight  # tied
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, mean=0.0, std=0.02)
            for name, p in self.named_parameters():
                if name.endswith("c_proj.weight"):
                    nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * layers))

        def forward(self, ids, targets):
            t = ids.shape[1]
            x = self.wte(ids) + self.wpe(torch.arange(t, device=ids.device))
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    return GPT()


def optimizer(torch, model, fused=None, foreach=None, lr=OPTIMIZER["lr"], betas=OPTIMIZER["betas"],
              weight_decay=OPTIMIZER["weight_decay"]):
    """configure_optimizers: decay the tensors of two or more dims, not the others."""
    params = [p for p in model.parameters() if p.requires_grad]  # the tied weight once
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    kw = {"lr": lr, "betas": betas}
    if fused is not None:
        kw["fused"] = fused
    if foreach is not None:
        kw["foreach"] = foreach
    return torch.optim.AdamW(groups, **kw)
