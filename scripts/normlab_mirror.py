"""Python side of normlab, shared by scripts/torch_checkpoint_check.py, scripts/torch_init_parity.py
and scripts/torch_baseline.py (--model gpt).

  Rng              normlab's PCG32 + Box-Muller generator (src/core/rng.cpp), bit for bit.
  ModelConfig      the model keys of a resolved config.json, with normlab's derived values
                   (eps, final_norm on/off, DeepNet's alpha and beta).
  validation_batch normlab's validation batch i (src/train/data.cpp: synthetic task and text:PATH).
  build_model      the PyTorch mirror of normlab's toy / gpt model (src/nn/modules.cpp), its
                   parameter names those of normlab's checkpoints (blocks.3.norm1.weight, ...);
                   sdpa / fused_rms swap in PyTorch's own attention and RMSNorm kernels (timing).
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
        for k, allowed in (("model", ("toy", "gpt")), ("norm", ("none", "layernorm", "rmsnorm", "seednorm")),
                           ("placement", ("pre", "post", "sandwich", "deepnorm")),
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
        return self.norm if self.placement in ("pre", "sandwich") else "none"

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


def data_source(cfg, data_root="."):
    """normlab's data source for a config (make_data_source); text paths are relative to data_root."""
    if cfg.data == "synthetic":
        return Synthetic(cfg.vocab, cfg.topics, cfg.noise, cfg.seed)
    if cfg.data.startswith("text:"):
        path = cfg.data[5:]
        if not os.path.isabs(path):
            path = os.path.join(data_root, path)
        return Text(path, cfg.seq_len, cfg.seed, cfg.vocabulary if cfg.tokenizer == "chars" else None)
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
