"""Python side of normlab, shared by scripts/torch_checkpoint_check.py, scripts/torch_init_parity.py
and scripts/torch_baseline.py (--model gpt).

  Rng              normlab's PCG32 + Box-Muller generator (src/core/rng.cpp), bit for bit.
  ModelConfig      the model keys of a resolved config.json, with normlab's derived values
                   (eps, final_norm on/off, DeepNet's alpha and beta).
  data_source      normlab's validation batches (src/train/data.cpp: the synthetic task, text:PATH;
                   src/train/seq2seq_data.cpp: copy, reverse, translate).
  build_model      the PyTorch mirror of normlab's toy / gpt model (src/nn/modules.cpp), its
                   parameter names those of normlab's checkpoints (blocks.3.norm1.weight, ...);
                   sdpa / fused_rms swap in PyTorch's own attention and RMSNorm kernels (timing).
  build_encdec_model  the mirror of normlab's encoder-decoder (src/nn/encdec.cpp), every op spelt out;
  build_nn_transformer  the same model as torch.nn.Transformer itself, where it covers the config
                   (nn_transformer_covers), loaded through nn_transformer_state.
  init_with_torch  normlab's init scheme for a mirror model, drawn with torch's RNG.
  normlab_init     normlab's initial weights as numpy arrays, drawn with the ported Rng in
                   normlab's draw order (docs/init.md), under the checkpoints' names.

Needs numpy; build_model needs PyTorch. `python3 scripts/normlab_mirror.py --self-test` (Python
alone) checks Rng against tests/data/pcg32_kat.json, the known answers normlab's own Rng test reads
(ctest: Scripts.NormlabMirrorPcg32).
"""
import json
import math
import os
import warnings

M32 = (1 << 32) - 1
M64 = (1 << 64) - 1

# Each norm's eps when the config's norm_eps is 0: default_eps (src/core/kinds.cpp); tests/core/names_test.cpp
# checks that this line says the same.
DEFAULT_EPS = {"layernorm": 1e-5, "rmsnorm": 1e-6, "seednorm": 1e-6}

# Stream ids (include/core/normlab/rng.h).
STREAM_INIT, STREAM_DATA, STREAM_TASK = 1, 2, 5


class Rng:
    """PCG32 (XSH-RR on a 64-bit LCG) with a stream id; normal() is Box-Muller with a spare."""

    def __init__(self, seed, stream=0):
        self.inc = ((stream << 1) | 1) & M64
        self.state = 0
        self.next_u32()
        self.state = (self.state + seed) & M64
        self.next_u32()
        self.has_spare = False
        self.spare = 0.0

    def next_u32(self):
        old = self.state
        self.state = (old * 6364136223846793005 + self.inc) & M64
        xorshifted = (((old >> 18) ^ old) >> 27) & M32
        rot = old >> 59
        return ((xorshifted >> rot) | (xorshifted << ((-rot) & 31))) & M32

    def next_u64(self):
        high = self.next_u32()
        low = self.next_u32()
        return (high << 32) | low

    def uniform(self, lo=None, hi=None):
        u = (self.next_u64() >> 11) * (2.0 ** -53)
        if lo is None:
            return u
        return lo + (hi - lo) * u

    def below(self, n):
        threshold = ((-n) & M32) % n
        while True:
            r = self.next_u32()
            if r >= threshold:
                return r % n

    def normal(self, mean=0.0, stddev=1.0):
        if self.has_spare:
            self.has_spare = False
            return mean + stddev * self.spare
        u1 = 0.0
        while u1 <= 0:
            u1 = self.uniform()
        u2 = self.uniform()
        radius = math.sqrt(-2.0 * math.log(u1))
        angle = 6.283185307179586476925286766559 * u2
        self.spare = radius * math.sin(angle)
        self.has_spare = True
        return mean + stddev * (radius * math.cos(angle))


# ---- config ------------------------------------------------------------------------------

class ModelConfig:
    """The keys of a resolved config.json (as `normlab train` writes it) that the model and data need."""

    def __init__(self, cfg):
        self.raw = dict(cfg)
        self.model = cfg["model"]
        self.norm = cfg["norm"]
        self.placement = cfg["placement"]
        self.final_norm = cfg["final_norm"]
        self.qk_norm = bool(cfg["qk_norm"])
        self.head_bias = bool(cfg["head_bias"])
        self.tie_embeddings = bool(cfg.get("tie_embeddings", False))
        self.bias = bool(cfg.get("bias", True))  # false: nanoGPT's bias=False (linears, LayerNorm's beta)
        # Training's dropout changes no parameter and is off at evaluation, which is all the mirror
        # computes (a model in PyTorch's eval mode): read so that a config with it is accepted.
        self.dropout = float(cfg.get("dropout", 0.0))
        self.tokenizer = cfg.get("tokenizer", "bytes")
        self.vocabulary = cfg.get("vocabulary")
        self.residual = bool(cfg["residual"])
        self.layers = int(cfg["layers"])
        self.d_model = int(cfg["d_model"])
        self.d_hidden = int(cfg["d_hidden"])
        self.heads = int(cfg["heads"])
        self.vocab = int(cfg["vocab"])
        self.seq_len = int(cfg["seq_len"])
        self.init = cfg["init"]
        self.norm_eps = float(cfg["norm_eps"])
        self.data = cfg["data"]
        self.topics = int(cfg["topics"])
        self.noise = float(cfg["noise"])
        self.batch_size = int(cfg["batch_size"])
        self.eval_batches = int(cfg["eval_batches"])
        self.seed = int(cfg["seed"])
        self.data_seed = int(cfg.get("data_seed", self.seed))
        # encdec: each stack's depth (unset: layers) and one token table for source and target.
        self.encoder_layers = int(cfg.get("encoder_layers", self.layers))
        self.decoder_layers = int(cfg.get("decoder_layers", self.layers))
        self.shared_embeddings = bool(cfg.get("shared_embeddings", True))
        placements = ("pre", "post", "sandwich", "deepnorm") + (("postsub",) if self.model == "encdec" else ())
        for k, allowed in (("model", ("toy", "gpt", "encdec")), ("norm", ("none", "layernorm", "rmsnorm", "seednorm")),
                           ("placement", placements),
                           ("final_norm", ("auto", "on", "off", "layernorm", "rmsnorm")), ("init", ("gpt2", "xavier", "torch", "fairseq"))):
            if getattr(self, k) not in allowed:
                raise ValueError(f"config {k} = {getattr(self, k)!r} is not one of {allowed}")

    @classmethod
    def from_file(cls, path):
        with open(path) as f:
            return cls(json.load(f))

    def eps(self):  # ModelConfig::eps
        if self.norm_eps > 0:
            return self.norm_eps
        return DEFAULT_EPS.get(self.norm, DEFAULT_EPS["layernorm"])

    def final_norm_kind(self):  # ModelConfig::final_norm_kind
        if self.final_norm == "off":
            return "none"
        if self.final_norm == "on":
            return self.norm
        if self.final_norm in ("layernorm", "rmsnorm"):
            return self.final_norm
        return self.norm if self.placement in ("pre", "sandwich", "postsub", "mixln") else "none"

    def final_norm_on(self):  # ModelConfig::final_norm_on
        return self.final_norm_kind() != "none"

    def final_eps(self):  # ModelConfig::final_eps
        if self.norm_eps > 0:
            return self.norm_eps
        return DEFAULT_EPS.get(self.final_norm_kind(), DEFAULT_EPS["layernorm"])

    def deepnet(self):  # DeepNet's alpha and init apply (make_block)
        return self.placement == "deepnorm" and self.norm != "none"

    def deepnorm_alpha(self):
        return (2.0 * self.layers) ** 0.25

    def deepnorm_beta(self):
        return (8.0 * self.layers) ** -0.25

    def encoder_alpha(self):  # EncDecConfig: DeepNet's encoder-decoder constants (N encoder, M decoder layers)
        n, m = self.encoder_layers, self.decoder_layers
        return 0.81 * (n ** 4 * m) ** (1.0 / 16) if self.deepnet() else 1.0

    def decoder_alpha(self):
        return (3.0 * self.decoder_layers) ** 0.25 if self.deepnet() else 1.0


# ---- data (src/train/data.cpp) -------------------------------------------------------------

class Synthetic:
    def __init__(self, vocab, topics, noise, seed):
        self.vocab, self.topics, self.noise, self.seed = vocab, topics, noise, seed
        self.ordinary = vocab - topics
        if topics < 1 or self.ordinary < 2:
            raise ValueError(f"vocab {vocab} must exceed topics {topics} by at least 2")
        rng = Rng(seed, STREAM_TASK)
        self.perms = []
        for _ in range(topics):
            p = list(range(self.ordinary))
            for i in range(self.ordinary - 1, 0, -1):  # Fisher-Yates
                j = rng.below(i + 1)
                p[i], p[j] = p[j], p[i]
            self.perms.append(p)

    def make(self, rng, batch, seq_len):
        inputs, targets = [], []
        r = self.ordinary
        for _ in range(batch):
            z = rng.below(self.topics)
            seq = [0] * (seq_len + 1)
            seq[0] = r + z
            seq[1] = rng.below(r)
            for t in range(2, seq_len + 1):
                noisy = rng.uniform() < self.noise
                uniform_tok = rng.below(r)  # drawn always
                seq[t] = uniform_tok if noisy else self.perms[z][seq[t - 1]]
            inputs.append(seq[:seq_len])
            targets.append(seq[1:seq_len + 1])
        return inputs, targets

    def val_batch(self, i, batch, seq_len):
        return self.make(Rng(self.seed ^ 0x5BD1E995, 1000 + i), batch, seq_len)


class Text:
    """Text windows as token ids: bytes, or characters numbered by their place in `vocabulary`."""

    def __init__(self, path, seq_len, seed, vocabulary=None):
        with open(path, "rb") as f:
            text = f.read()
        if vocabulary is not None:
            ids = {c: i for i, c in enumerate(vocabulary)}
            text = [ids[c] for c in text.decode("utf-8")]
        split = len(text) * 9 // 10
        self.val = text[split:]
        self.seed = seed
        if len(self.val) < seq_len + 1:
            raise ValueError(f"text file {path}: validation split of {len(self.val)} bytes is too short")

    def val_batch(self, i, batch, seq_len):
        rng = Rng(self.seed ^ 0x5BD1E995, 1000 + i)
        starts = len(self.val) - seq_len
        inputs, targets = [], []
        for _ in range(batch):
            s = rng.below(starts)
            inputs.append(list(self.val[s:s + seq_len]))
            targets.append(list(self.val[s + 1:s + seq_len + 1]))
        return inputs, targets


class Seq2Seq:
    """The encoder-decoder's tasks (src/train/seq2seq_data.cpp): val_batch gives (sources, inputs, targets)."""

    def __init__(self, task, vocab, noise, seed):
        self.task, self.vocab, self.noise, self.seed = task, vocab, noise, seed
        self.ordinary = vocab - 1  # V-1 starts the decoder's input
        self.mapping = list(range(self.ordinary))
        if task == "translate":
            rng = Rng(seed, STREAM_TASK)
            for i in range(self.ordinary - 1, 0, -1):  # Fisher-Yates
                j = rng.below(i + 1)
                self.mapping[i], self.mapping[j] = self.mapping[j], self.mapping[i]

    def rule_token(self, src, t):
        n = len(src)
        if self.task == "reverse":
            return src[n - 1 - t]
        if self.task == "translate":  # each window of 3 positions reversed, then mapped
            start = t - t % 3
            end = min(start + 3, n)
            return self.mapping[src[start + end - 1 - t]]
        return src[t]

    def val_batch(self, i, batch, seq_len):
        rng = Rng(self.seed ^ 0x5BD1E995, 1000 + i)
        flat = [rng.below(self.ordinary) for _ in range(batch * seq_len)]
        sources = [flat[b * seq_len:(b + 1) * seq_len] for b in range(batch)]
        inputs, targets = [], []
        for src in sources:
            tg = []
            for t in range(seq_len):
                noisy = rng.uniform() < self.noise
                uniform_tok = rng.below(self.ordinary)  # drawn always
                tg.append(uniform_tok if noisy else self.rule_token(src, t))
            targets.append(tg)
            inputs.append([self.ordinary] + tg[:-1])
        return sources, inputs, targets


def data_source(cfg, data_root="."):
    """normlab's data source for a config (make_data_source); text paths are relative to data_root."""
    if cfg.data == "synthetic":
        return Synthetic(cfg.vocab, cfg.topics, cfg.noise, cfg.data_seed)
    if cfg.data in ("copy", "reverse", "translate"):
        return Seq2Seq(cfg.data, cfg.vocab, cfg.noise, cfg.data_seed)
    if cfg.data.startswith("text:"):
        path = cfg.data[5:]
        if not os.path.isabs(path):
            path = os.path.join(data_root, path)
        return Text(path, cfg.seq_len, cfg.data_seed, cfg.vocabulary if cfg.tokenizer == "chars" else None)
    raise ValueError(f"data {cfg.data!r} is not synthetic or text:PATH")


# ---- the PyTorch mirror (src/nn/modules.cpp) -------------------------------------------------

def build_model(cfg, torch, dtype=None, sdpa=False, fused_rms=False, mix="cumsum"):
    """An nn.Module computing normlab's forward for cfg; model(ids, targets) -> mean cross-entropy.

    By default every op is spelt out (explicit masked softmax attention, RMSNorm as x * rsqrt(...)),
    for the checkpoint and init checks. For timing (scripts/torch_baseline.py --model gpt) the same
    forward can use PyTorch's own fast kernels: sdpa=True computes attention with
    F.scaled_dot_product_attention(q, k, v, is_causal=True) (default scale 1/sqrt(Dh), as normlab),
    fused_rms=True every RMSNorm (QK-Norm's too) with F.rms_norm; mix="matmul" computes the toy's
    prefix mean as one (T x T) averaging matrix times x instead of a cumulative sum (the faster of
    the two depends on the machine; the values agree to float rounding).

    Parameters are created empty (torch.empty); load a checkpoint into them, or initialize them
    (torch_init_parity.py). Names: tok_emb.weight, pos_emb.weight, blocks.{l}.norm1.weight/.bias,
    blocks.{l}.attn.{q,k,v,o}.weight/.bias, blocks.{l}.attn.{q,k}_norm.weight, blocks.{l}.mix.*,
    blocks.{l}.norm1b.*, blocks.{l}.norm2.*, blocks.{l}.mlp.fc{1,2}.*, blocks.{l}.norm2b.*,
    final_norm.*, head.weight (+ head.bias).
    """
    nn = torch.nn
    F = torch.nn.functional
    dtype = dtype or torch.float32
    d, hdim, V, L = cfg.d_model, cfg.d_hidden, cfg.vocab, cfg.layers
    kw = dict(dtype=dtype)

    def rms(x, gamma, eps):
        if fused_rms:
            return F.rms_norm(x, (x.shape[-1],), gamma, eps)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gamma

    class Norm(nn.Module):
        def __init__(self, kind, n, eps):
            super().__init__()
            self.kind, self.eps, self.n = kind, eps, n
            if kind != "none":
                self.weight = nn.Parameter(torch.ones(n, **kw))
            if kind == "layernorm" and cfg.bias:
                self.bias = nn.Parameter(torch.zeros(n, **kw))
            elif kind == "layernorm":
                self.bias = None  # F.layer_norm without a shift, as nn.LayerNorm(bias=False)
            if kind == "seednorm":  # SeeDNorm (Cai et al. 2025): alpha 1, direction (the paper's beta) 0
                self.alpha = nn.Parameter(torch.ones(n, **kw))
                self.direction = nn.Parameter(torch.zeros(n, **kw))

        def forward(self, x):
            if self.kind == "layernorm":
                return F.layer_norm(x, (self.n,), self.weight, self.bias, self.eps)
            if self.kind == "rmsnorm":
                return rms(x, self.weight, self.eps)
            if self.kind == "seednorm":
                t = torch.tanh(x @ self.direction).unsqueeze(-1)
                return (self.weight + self.alpha * t) * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
            return x

    class Gain(nn.Module):  # QK-Norm's RMSNorm gain over a head's Dh channels (RMSNorm's default eps)
        def __init__(self, n):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(n, **kw))

    def linear(n_in, n_out, bias=None):  # bias None: the config's
        return nn.Linear(n_in, n_out, bias=cfg.bias if bias is None else bias, **kw)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = linear(d, d), linear(d, d), linear(d, d), linear(d, d)
            self.heads = cfg.heads
            self.dh = d // cfg.heads
            if cfg.qk_norm:
                self.q_norm, self.k_norm = Gain(self.dh), Gain(self.dh)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.q(x), self.k(x), self.v(x)
            if cfg.qk_norm:
                q = rms(q.view(B, T, self.heads, self.dh), self.q_norm.weight, DEFAULT_EPS["rmsnorm"]).reshape(B, T, C)
                k = rms(k.view(B, T, self.heads, self.dh), self.k_norm.weight, DEFAULT_EPS["rmsnorm"]).reshape(B, T, C)
            split = lambda t: t.view(B, T, self.heads, self.dh).transpose(1, 2)  # (B, H, T, Dh)
            q, k, v = split(q), split(k), split(v)
            if sdpa:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                return self.o(y.transpose(1, 2).reshape(B, T, C))
            s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(self.dh))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            p = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)
            y = (p @ v).transpose(1, 2).reshape(B, T, C)
            return self.o(y)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = linear(d, hdim), linear(hdim, d)

        def forward(self, x):
            return self.fc2(F.gelu(self.fc1(x)))  # exact (erf) GELU

    averaging = {}  # (T, dtype, device) -> the (T x T) matrix, made once (not timed per step)

    def prefix_mean(x):  # y_t = mean_{s<=t} x_s
        T = x.shape[1]
        if mix == "matmul":  # row t of the averaging matrix holds 1/(t+1) in columns 0..t
            key = (T, x.dtype, x.device)
            if key not in averaging:
                count = torch.arange(1, T + 1, dtype=x.dtype, device=x.device).view(T, 1)
                averaging[key] = torch.ones(T, T, dtype=x.dtype, device=x.device).tril() / count
            return torch.matmul(averaging[key], x)
        return x.cumsum(1) / torch.arange(1, T + 1, dtype=x.dtype, device=x.device).view(1, T, 1)

    eps = cfg.eps()

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            nk = cfg.norm
            self.norm1 = Norm(nk, d, eps)
            if cfg.model == "gpt":
                self.attn = Attention()
            else:
                self.mix = linear(d, d)
            if cfg.placement == "sandwich":
                self.norm1b = Norm(nk, d, eps)
            self.norm2 = Norm(nk, d, eps)
            self.mlp = MLP()
            if cfg.placement == "sandwich":
                self.norm2b = Norm(nk, d, eps)
            self.alpha = cfg.deepnorm_alpha() if cfg.deepnet() else 1.0

        def f1(self, x):
            return self.attn(x) if cfg.model == "gpt" else self.mix(prefix_mean(x))

        def forward(self, x):  # block_forward, Sublayers::live
            p = cfg.placement
            if not cfg.residual:
                if p == "pre":
                    h = self.f1(self.norm1(x))
                    return self.mlp(self.norm2(h))
                if p == "sandwich":
                    h = self.norm1b(self.f1(self.norm1(x)))
                    return self.norm2b(self.mlp(self.norm2(h)))
                h = self.norm1(self.f1(x))  # post, deepnorm
                return self.norm2(self.mlp(h))
            if cfg.norm == "none":
                h = x + self.f1(x)
                return h + self.mlp(h)
            if p == "pre":
                h = x + self.f1(self.norm1(x))
                return h + self.mlp(self.norm2(h))
            if p in ("post", "deepnorm"):
                h = self.norm1(self.alpha * x + self.f1(x))
                return self.norm2(self.alpha * h + self.mlp(h))
            h = x + self.norm1b(self.f1(self.norm1(x)))  # sandwich
            return h + self.norm2b(self.mlp(self.norm2(h)))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_emb = nn.Embedding(V, d, **kw)
            self.pos_emb = nn.Embedding(cfg.seq_len, d, **kw)
            self.blocks = nn.ModuleList([Block() for _ in range(L)])
            self.final_norm = Norm(cfg.final_norm_kind(), d, cfg.final_eps())
            self.head = linear(d, V, bias=cfg.head_bias)
            if cfg.tie_embeddings:  # nanoGPT's weight tying; the checkpoint holds it once, as tok_emb.weight
                self.head.weight = self.tok_emb.weight

        def logits(self, ids):
            B, T = ids.shape
            tokens = self.tok_emb(ids)
            if cfg.init == "fairseq":  # fairseq's sqrt(d) embedding scale (Model::forward)
                tokens = tokens * math.sqrt(d)
            x = tokens + self.pos_emb(torch.arange(T, device=ids.device)).unsqueeze(0)
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.final_norm(x))

        def forward(self, ids, targets):
            logits = self.logits(ids)
            return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))  # mean over B*T tokens

    return Model()


# ---- the encoder-decoder (src/nn/encdec.cpp) ----------------------------------------------------

def build_encdec_model(cfg, torch, dtype=None):
    """The PyTorch mirror of normlab's encoder-decoder, every op spelt out, under the checkpoints'
    names (tok_emb or src_emb/tgt_emb, src_pos_emb, tgt_pos_emb, encoder.{l}.{norm1,attn,norm2,mlp},
    decoder.{l}.{norm1,self_attn,norm2,cross_attn,norm3,mlp}, {encoder,decoder}.final_norm, head);
    model(src, tgt_in, tgt_out) -> mean cross-entropy of tgt_out."""
    if cfg.raw.get("gemma_norm", False):
        raise ValueError("gemma_norm (a gain of 1 + w) is not mirrored")
    nn = torch.nn
    F = torch.nn.functional
    dtype = dtype or torch.float32
    kw = dict(dtype=dtype)
    d, V = cfg.d_model, cfg.vocab
    rms_eps = DEFAULT_EPS["rmsnorm"]

    def rms(x, gamma, eps):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gamma

    class Norm(nn.Module):
        def __init__(self, kind, eps):
            super().__init__()
            self.kind, self.eps = kind, eps
            if kind != "none":
                self.weight = nn.Parameter(torch.ones(d, **kw))
            if kind == "layernorm":
                self.bias = nn.Parameter(torch.zeros(d, **kw)) if cfg.bias else None

        def forward(self, x):
            if self.kind == "layernorm":
                return F.layer_norm(x, (d,), self.weight, self.bias, self.eps)
            if self.kind == "rmsnorm":
                return rms(x, self.weight, self.eps)
            if self.kind != "none":
                raise ValueError(f"the encoder-decoder mirror has no norm {self.kind}")
            return x

    class Gain(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(n, **kw))

    class Attention(nn.Module):  # causal self-attention, or over another sequence's keys (unmasked)
        def __init__(self, causal):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=cfg.bias, **kw) for _ in range(4))
            self.causal, self.heads, self.dh = causal, cfg.heads, d // cfg.heads
            if cfg.qk_norm:
                self.q_norm, self.k_norm = Gain(self.dh), Gain(self.dh)

        def forward(self, x, keys=None):
            keys = x if keys is None else keys
            (B, T, _), S = x.shape, keys.shape[1]
            q = self.q(x).view(B, T, self.heads, self.dh)
            k = self.k(keys).view(B, S, self.heads, self.dh)
            v = self.v(keys).view(B, S, self.heads, self.dh)
            if cfg.qk_norm:
                q, k = rms(q, self.q_norm.weight, rms_eps), rms(k, self.k_norm.weight, rms_eps)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(self.dh))
            if self.causal:
                s = s.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(), float("-inf"))
            y = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, d)
            return self.o(y)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(d, cfg.d_hidden, bias=cfg.bias, **kw)
            self.fc2 = nn.Linear(cfg.d_hidden, d, bias=cfg.bias, **kw)

        def forward(self, x):
            return self.fc2(F.gelu(self.fc1(x)))

    placement = "pre" if cfg.norm == "none" else cfg.placement

    def connect(x, f, norm, norm_b, alpha):  # Connection::operator()
        if placement == "pre":
            return x + f(norm(x))
        if placement in ("post", "deepnorm"):
            return norm(alpha * x + f(x))
        if placement == "sandwich":
            return x + norm_b(f(norm(x)))
        return x + norm(f(x))  # postsub

    class Layer(nn.Module):  # an encoder layer, or with cross-attention a decoder layer
        def __init__(self, decoder):
            super().__init__()
            self.decoder = decoder
            names = ["norm1", "norm2"] + (["norm3"] if decoder else [])
            for n in names:
                setattr(self, n, Norm(cfg.norm, cfg.eps()))
                if placement == "sandwich":
                    setattr(self, n + "b", Norm(cfg.norm, cfg.eps()))
            if decoder:
                self.self_attn, self.cross_attn = Attention(True), Attention(False)
            else:
                self.attn = Attention(False)
            self.mlp = MLP()
            self.alpha = cfg.decoder_alpha() if decoder else cfg.encoder_alpha()

        def sub(self, name, x, f):
            return connect(x, f, getattr(self, name), getattr(self, name + "b", None), self.alpha)

        def forward(self, x, memory=None):
            if self.decoder:
                x = self.sub("norm1", x, self.self_attn)
                x = self.sub("norm2", x, lambda y: self.cross_attn(y, memory))
                return self.sub("norm3", x, self.mlp)
            x = self.sub("norm1", x, self.attn)
            return self.sub("norm2", x, self.mlp)

    class Stack(nn.Module):
        def __init__(self, decoder, layers):
            super().__init__()
            for l in range(layers):
                self.add_module(str(l), Layer(decoder))
            self.final_norm = Norm(cfg.final_norm_kind(), cfg.final_eps())

        def forward(self, x, memory=None):
            for l in range(len(self._modules) - 1):
                x = self._modules[str(l)](x, memory)
            return self.final_norm(x)

    class EncDec(nn.Module):
        def __init__(self):
            super().__init__()
            if cfg.shared_embeddings:
                self.tok_emb = nn.Embedding(V, d, **kw)
            else:
                self.src_emb, self.tgt_emb = nn.Embedding(V, d, **kw), nn.Embedding(V, d, **kw)
            self.src_pos_emb = nn.Embedding(cfg.seq_len, d, **kw)
            self.tgt_pos_emb = nn.Embedding(cfg.seq_len, d, **kw)
            self.encoder, self.decoder = Stack(False, cfg.encoder_layers), Stack(True, cfg.decoder_layers)
            self.head = nn.Linear(d, V, bias=False, **kw)
            if cfg.tie_embeddings:  # the head is the target embedding, one tensor in the checkpoint
                self.head.weight = self.target_table().weight

        def target_table(self):
            return self.tok_emb if cfg.shared_embeddings else self.tgt_emb

        def embed(self, ids, table, positions):
            tokens = table(ids) * (math.sqrt(d) if cfg.init == "fairseq" else 1.0)
            return tokens + positions(torch.arange(ids.shape[1])).unsqueeze(0)

        def forward(self, src, tgt_in, tgt_out):
            memory = self.encoder(self.embed(src, self.tok_emb if cfg.shared_embeddings else self.src_emb,
                                             self.src_pos_emb))
            x = self.decoder(self.embed(tgt_in, self.target_table(), self.tgt_pos_emb), memory)
            return F.cross_entropy(self.head(x).reshape(-1, V), tgt_out.reshape(-1))

    return EncDec()


def nn_transformer_covers(cfg):
    """Whether torch.nn.Transformer computes cfg's encoder-decoder: LayerNorm, pre or post, no QK-Norm,
    each final norm either the blocks' LayerNorm or off (Post-LN), biases on or off together."""
    final = cfg.final_norm_kind()
    return (cfg.model == "encdec" and cfg.norm == "layernorm" and not cfg.raw.get("gemma_norm", False) and cfg.placement in ("pre", "post") and
            not cfg.qk_norm and final in ("layernorm", "none") and (final == "none" or cfg.final_eps() == cfg.eps()))


def build_nn_transformer(cfg, torch, dtype=None):
    """torch.nn.Transformer (batch_first, exact GELU, no dropout) with normlab's embeddings and head
    around it; load_normlab(state) takes a normlab checkpoint. model(src, tgt_in, tgt_out) -> loss."""
    nn = torch.nn
    dtype = dtype or torch.float32
    d, V = cfg.d_model, cfg.vocab
    mirror = build_encdec_model(cfg, torch, dtype)  # its embeddings and head; its stacks unused

    class Wrapped(nn.Module):
        def __init__(self):
            super().__init__()
            with warnings.catch_warnings():  # its nested-tensor fast path's note on norm_first
                warnings.simplefilter("ignore")
                self.core = self.make_core()
            if cfg.final_norm_kind() == "none":
                self.core.encoder.norm, self.core.decoder.norm = None, None

        @staticmethod
        def make_core():
            return nn.Transformer(d, cfg.heads, cfg.encoder_layers, cfg.decoder_layers, cfg.d_hidden,
                                  dropout=0.0, activation="gelu", layer_norm_eps=cfg.eps(), batch_first=True,
                                  norm_first=cfg.placement == "pre", bias=cfg.bias, dtype=dtype)

        def load_normlab(self, state):
            outside = {k: v for k, v in state.items() if not k.startswith(("encoder.", "decoder."))}
            missing, unexpected = mirror.load_state_dict(outside, strict=False)
            missing = [k for k in missing if not k.startswith(("encoder.", "decoder."))]
            if missing or unexpected:
                raise KeyError(f"embeddings and head: missing {missing}, unexpected {unexpected}")
            self.core.load_state_dict(nn_transformer_state(cfg, state), strict=True)

        def forward(self, src, tgt_in, tgt_out):
            table_src = mirror.tok_emb if cfg.shared_embeddings else mirror.src_emb
            mask = nn.Transformer.generate_square_subsequent_mask(tgt_in.shape[1], dtype=dtype)
            x = self.core(mirror.embed(src, table_src, mirror.src_pos_emb),
                          mirror.embed(tgt_in, mirror.target_table(), mirror.tgt_pos_emb),
                          tgt_mask=mask, tgt_is_causal=True)
            return torch.nn.functional.cross_entropy(mirror.head(x).reshape(-1, V), tgt_out.reshape(-1))

    return Wrapped()


def nn_transformer_state(cfg, state):
    """A normlab encoder-decoder checkpoint's stacks as torch.nn.Transformer's state_dict: q, k, v
    packed into in_proj_weight (and in_proj_bias), o as out_proj, fc1/fc2 as linear1/linear2,
    cross_attn as multihead_attn, the final norms as encoder.norm / decoder.norm."""
    import torch
    out = {}

    def attention(dst, src):
        out[dst + ".in_proj_weight"] = torch.cat([state[f"{src}.{p}.weight"] for p in "qkv"])
        out[dst + ".out_proj.weight"] = state[src + ".o.weight"]
        if cfg.bias:
            out[dst + ".in_proj_bias"] = torch.cat([state[f"{src}.{p}.bias"] for p in "qkv"])
            out[dst + ".out_proj.bias"] = state[src + ".o.bias"]

    def copy(dst, src):
        for p in ("weight", "bias"):
            if f"{src}.{p}" in state:
                out[f"{dst}.{p}"] = state[f"{src}.{p}"]

    for stack, layers in (("encoder", cfg.encoder_layers), ("decoder", cfg.decoder_layers)):
        for l in range(layers):
            at, sub = f"{stack}.layers.{l}", f"{stack}.{l}"
            if stack == "encoder":
                attention(at + ".self_attn", sub + ".attn")
            else:
                attention(at + ".self_attn", sub + ".self_attn")
                attention(at + ".multihead_attn", sub + ".cross_attn")
                copy(at + ".norm3", sub + ".norm3")
            copy(at + ".norm1", sub + ".norm1")
            copy(at + ".norm2", sub + ".norm2")
            copy(at + ".linear1", sub + ".mlp.fc1")
            copy(at + ".linear2", sub + ".mlp.fc2")
        copy(stack + ".norm", stack + ".final_norm")
    return out


# ---- normlab's init schemes drawn with torch's RNG -------------------------------------------------

def init_with_torch(torch, model, cfg, fairseq_as_code=False):
    """Initializes a build_model(cfg) model in place with cfg's scheme, drawn with torch's own RNG
    (torch.nn.init): the same distributions as normlab's Model(cfg, seed) (docs/init.md), not the same
    numbers. Under init torch, nn.Linear / nn.Embedding keep the defaults they were constructed with.
    fairseq_as_code: fairseq's code (q/k/v xavier_uniform with gain 1/sqrt(2), fc1/fc2 PyTorch
    defaults) instead of the scheme normlab implements (torch_init_parity.py compares both)."""
    init = torch.nn.init
    s, d, L = cfg.init, cfg.d_model, cfg.layers
    with torch.no_grad():
        emb_std = {"torch": None, "fairseq": 1.0 / math.sqrt(d)}.get(s, 0.02)
        if emb_std is not None:
            init.normal_(model.tok_emb.weight, 0.0, emb_std)
            init.normal_(model.pos_emb.weight, 0.0, emb_std)
        for blk in model.blocks:
            linears = ([("attn.q", blk.attn.q), ("attn.k", blk.attn.k), ("attn.v", blk.attn.v), ("attn.o", blk.attn.o)]
                       if cfg.model == "gpt" else [("mix", blk.mix)])
            linears += [("mlp.fc1", blk.mlp.fc1), ("mlp.fc2", blk.mlp.fc2)]
            for name, lin in linears:
                if cfg.deepnet():
                    init.xavier_normal_(lin.weight, gain=1.0 if name in ("attn.q", "attn.k") else cfg.deepnorm_beta())
                elif s == "torch":
                    continue  # PyTorch's defaults, as constructed
                elif s == "fairseq" and fairseq_as_code:
                    if name in ("attn.q", "attn.k", "attn.v"):
                        init.xavier_uniform_(lin.weight, gain=1 / math.sqrt(2))  # bias: nn.Linear's default
                    elif name in ("attn.o", "mix"):
                        init.xavier_uniform_(lin.weight)
                        init.zeros_(lin.bias)
                    continue  # fc1, fc2: nn.Linear's defaults
                elif s == "fairseq":
                    init.xavier_uniform_(lin.weight)
                elif s == "xavier":
                    init.xavier_normal_(lin.weight)
                else:
                    std = 0.02 / math.sqrt(2.0 * L) if name in ("attn.o", "mix", "mlp.fc2") else 0.02
                    init.normal_(lin.weight, 0.0, std)
                init.zeros_(lin.bias)
        if s == "fairseq":
            init.normal_(model.head.weight, 0.0, 1.0 / math.sqrt(d))
        elif s != "torch":
            init.normal_(model.head.weight, 0.0, 0.02)
        if model.head.bias is not None:
            init.zeros_(model.head.bias)
    return model


# ---- normlab's init, drawn with the ported Rng (Model::Model, make_block) ----------------------

def normlab_init(cfg, seed=None):
    """normlab's initial parameters for cfg (float32 numpy arrays keyed by checkpoint name), in
    normlab's draw order: bit-identical to Model(cfg, seed) when libm's log/sin/cos agree."""
    import numpy as np

    seed = cfg.seed if seed is None else seed
    rng = Rng(seed, STREAM_INIT)
    out = {}
    d, h, L = cfg.d_model, cfg.d_hidden, cfg.layers

    def normal(shape, std):
        n = int(np.prod(shape))
        return np.array([rng.normal(0.0, std) for _ in range(n)], dtype=np.float64).reshape(shape)

    def uniform(shape, bound):
        n = int(np.prod(shape))
        return np.array([rng.uniform(-bound, bound) for _ in range(n)], dtype=np.float64).reshape(shape)

    def put(name, arr):
        out[name] = np.asarray(arr, dtype=np.float64).astype(np.float32)

    emb_std = 1.0 if cfg.init == "torch" else (1.0 / math.sqrt(d) if cfg.init == "fairseq" else 0.02)
    put("tok_emb.weight", normal((cfg.vocab, d), emb_std))
    put("pos_emb.weight", normal((cfg.seq_len, d), emb_std))
    deepnet = cfg.deepnet()
    scheme = "xavier" if deepnet else cfg.init
    resid_std = 0.02 / math.sqrt(2.0 * L)
    gain = cfg.deepnorm_beta() if deepnet else 1.0

    def norm(name, kind=None):
        kind = cfg.norm if kind is None else kind
        if kind == "none":
            return
        put(name + ".weight", np.ones(d))
        if kind == "layernorm" and cfg.bias:
            put(name + ".bias", np.zeros(d))
        if kind == "seednorm":
            put(name + ".alpha", np.ones(d))
            put(name + ".direction", np.zeros(d))

    def lin(name, n_out, n_in, residual_proj, xavier_gain):
        if scheme == "xavier":
            w = normal((n_out, n_in), xavier_gain * math.sqrt(2.0 / (n_in + n_out)))
        elif scheme == "torch":
            w = uniform((n_out, n_in), 1.0 / math.sqrt(n_in))
        elif scheme == "fairseq":
            w = uniform((n_out, n_in), math.sqrt(6.0 / (n_in + n_out)))
        else:
            w = normal((n_out, n_in), resid_std if residual_proj else 0.02)
        put(name + ".weight", w)
        if cfg.bias:
            put(name + ".bias", uniform((n_out,), 1.0 / math.sqrt(n_in)) if scheme == "torch" else np.zeros(n_out))

    for l in range(L):
        p = f"blocks.{l}"
        norm(p + ".norm1")
        if cfg.model == "gpt":
            lin(p + ".attn.q", d, d, False, 1.0)
            lin(p + ".attn.k", d, d, False, 1.0)
            lin(p + ".attn.v", d, d, False, gain)
            lin(p + ".attn.o", d, d, True, gain)
            if cfg.qk_norm:
                put(p + ".attn.q_norm.weight", np.ones(d // cfg.heads))
                put(p + ".attn.k_norm.weight", np.ones(d // cfg.heads))
        else:
            lin(p + ".mix", d, d, True, gain)
        if cfg.placement == "sandwich":
            norm(p + ".norm1b")
        norm(p + ".norm2")
        lin(p + ".mlp.fc1", h, d, False, gain)
        lin(p + ".mlp.fc2", d, h, True, gain)
        if cfg.placement == "sandwich":
            norm(p + ".norm2b")
    if cfg.final_norm_on():
        norm("final_norm", cfg.final_norm_kind())
    if cfg.tie_embeddings:  # the head is tok_emb, drawn above
        pass
    elif cfg.init == "torch":
        put("head.weight", uniform((cfg.vocab, d), 1.0 / math.sqrt(d)))
    elif cfg.init == "fairseq":
        put("head.weight", normal((cfg.vocab, d), 1.0 / math.sqrt(d)))
    else:
        put("head.weight", normal((cfg.vocab, d), 0.02))
    if cfg.head_bias:
        put("head.bias", np.zeros(cfg.vocab))
    return out


# ---- self-test ---------------------------------------------------------------------------
def self_test(kat_path=None):
    """Checks Rng against the PCG32 known answers; returns the list of mismatches (empty: pass)."""
    if kat_path is None:
        kat_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "pcg32_kat.json")
    with open(kat_path) as f:
        kat = json.load(f)
    tol = kat["normal_tolerance"]
    bad = []
    for c in kat["cases"]:
        seed, stream = c["seed"], c["stream"]
        draws = {
            "u32": lambda r: r.next_u32(),
            "uniform": lambda r: r.uniform(),
            "below_10": lambda r: r.below(10),
            "normal": lambda r: r.normal(),
        }
        for key, draw in draws.items():
            rng = Rng(seed, stream)
            for i, want in enumerate(c[key]):
                got = draw(rng)
                if (abs(got - want) > tol) if key == "normal" else (got != want):
                    bad.append(f"Rng({seed}, {stream}) {key}[{i}]: got {got!r}, want {want!r}")
    if not kat["cases"]:
        bad.append(f"{kat_path}: no cases")
    return bad


if __name__ == "__main__":
    import sys

    if len(sys.argv) in (2, 3) and sys.argv[1] == "--self-test":
        problems = self_test(sys.argv[2] if len(sys.argv) == 3 else None)
        for p in problems:
            print(p, file=sys.stderr)
        print(f"normlab_mirror self-test: {'FAIL' if problems else 'ok'} ({len(problems)} mismatches)")
        sys.exit(1 if problems else 0)
    print("usage: normlab_mirror.py --self-test [pcg32_kat.json]  (a module otherwise)", file=sys.stderr)
    sys.exit(2)
