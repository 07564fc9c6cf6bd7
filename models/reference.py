"""Native PyTorch re-implementations of the reference models graphcost is checked against.

Each model matches its torchvision / Hugging Face counterpart layer for layer (same parameter shapes and
counts), so its ONNX export has the well-known cost, without needing torchvision or transformers:

=================  ============  ==============================================================
name               params        conv+matmul MACs, bias excluded (batch 1)
=================  ============  ==============================================================
resnet18           11,689,512    1,814,073,344  (224x224)
resnet50           25,557,032    4,089,184,256  (224x224, torchvision v1.5: stride on the 3x3)
mobilenet_v2        3,504,872      300,774,272  (224x224)
bert_base         109,482,240   11,174,215,680  (seq 128, with pooler)
gpt2_small        124,439,808   16,114,089,984  (seq 128, with the tied LM head)
tiny_cnn               10,138        6,340,928  (32x32)
tiny_transformer      124,800        1,769,472  (seq 16)
=================  ============  ==============================================================

Weights are random but deterministic: every factory seeds its own forked RNG, so building a model twice gives
bit-identical weights and never disturbs the caller's RNG. BatchNorm layers get random affine parameters and
running statistics, so folding BN (as the exporters do) is not a no-op. All models are returned in eval mode.

Simplifications that do not change shapes or costs: no dropout (eval mode anyway), BERT has no attention mask
(equivalent to an all-ones mask) and token_type_ids are always 0, GPT-2 has no KV cache.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "MODELS",
    "REFERENCE",
    "SHIPPED",
    "ModelSpec",
    "bert_base",
    "build",
    "example_inputs",
    "gpt2_small",
    "mobilenet_v2",
    "param_count",
    "resnet18",
    "resnet50",
    "tiny_cnn",
    "tiny_transformer",
]

DEFAULT_SEED = 0


def _seeded(factory: Callable[[], nn.Module], seed: int) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = factory()
        _randomize_batchnorm(model)
    return model.eval()


def _randomize_batchnorm(model: nn.Module) -> None:
    """Give every BatchNorm non-trivial statistics (uses the already-seeded global RNG)."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.0)
                m.bias.normal_(0.0, 0.1)
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 1.5)


def param_count(model: nn.Module) -> int:
    """Number of unique parameters (tied weights counted once, like HF's ``num_parameters()``)."""
    return sum(p.numel() for p in model.parameters())


# --------------------------------------------------------------------------------------------------------------
# ResNet (torchvision.models.resnet)
# --------------------------------------------------------------------------------------------------------------


def _conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


def _conv1x1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = _conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """torchvision's v1.5 bottleneck: the stride sits on the 3x3 conv."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = _conv1x1(inplanes, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = _conv1x1(planes, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, block: type[BasicBlock] | type[Bottleneck], layers: list[int], num_classes: int = 1000) -> None:
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def _make_layer(self, block: type[BasicBlock] | type[Bottleneck], planes: int, blocks: int,
                    stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                _conv1x1(self.inplanes, planes * block.expansion, stride),
                nn.BatchNorm2d(planes * block.expansion),
            )
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def resnet18(seed: int = DEFAULT_SEED) -> nn.Module:
    """torchvision ``resnet18``: 11,689,512 params."""
    return _seeded(lambda: ResNet(BasicBlock, [2, 2, 2, 2]), seed)


def resnet50(seed: int = DEFAULT_SEED) -> nn.Module:
    """torchvision ``resnet50`` (v1.5): 25,557,032 params."""
    return _seeded(lambda: ResNet(Bottleneck, [3, 4, 6, 3]), seed)


# --------------------------------------------------------------------------------------------------------------
# MobileNetV2 (torchvision.models.mobilenetv2, width 1.0)
# --------------------------------------------------------------------------------------------------------------


def _make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class ConvBNReLU6(nn.Sequential):
    def __init__(self, cin: int, cout: int, kernel: int = 3, stride: int = 1, groups: int = 1) -> None:
        super().__init__(
            nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU6(inplace=True),
        )


class InvertedResidual(nn.Module):
    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden = round(inp * expand_ratio)
        self.use_res_connect = stride == 1 and inp == oup
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBNReLU6(inp, hidden, kernel=1))
        layers += [
            ConvBNReLU6(hidden, hidden, stride=stride, groups=hidden),
            nn.Conv2d(hidden, oup, 1, 1, 0, bias=False),
            nn.BatchNorm2d(oup),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0) -> None:
        super().__init__()
        settings = [  # t (expansion), c (channels), n (repeats), s (first stride)
            [1, 16, 1, 1],
            [6, 24, 2, 2],
            [6, 32, 3, 2],
            [6, 64, 4, 2],
            [6, 96, 3, 1],
            [6, 160, 3, 2],
            [6, 320, 1, 1],
        ]
        input_channel = _make_divisible(32 * width_mult)
        self.last_channel = _make_divisible(1280 * max(1.0, width_mult))
        features: list[nn.Module] = [ConvBNReLU6(3, input_channel, stride=2)]
        for t, c, n, s in settings:
            output_channel = _make_divisible(c * width_mult)
            for i in range(n):
                features.append(InvertedResidual(input_channel, output_channel, s if i == 0 else 1, t))
                input_channel = output_channel
        features.append(ConvBNReLU6(input_channel, self.last_channel, kernel=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(p=0.2), nn.Linear(self.last_channel, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = torch.flatten(F.adaptive_avg_pool2d(x, (1, 1)), 1)
        return self.classifier(x)


def mobilenet_v2(seed: int = DEFAULT_SEED) -> nn.Module:
    """torchvision ``mobilenet_v2``: 3,504,872 params."""
    return _seeded(MobileNetV2, seed)


# --------------------------------------------------------------------------------------------------------------
# Transformer pieces
# --------------------------------------------------------------------------------------------------------------


def _split_heads(x: torch.Tensor, n_head: int) -> torch.Tensor:
    """(batch, seq, n_head*head_dim) -> (batch, n_head, seq, head_dim); shape taken from x, so export stays dynamic."""
    return x.view(*x.shape[:-1], n_head, x.shape[-1] // n_head).transpose(1, 2)


def _merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(batch, n_head, seq, head_dim) -> (batch, seq, n_head*head_dim)."""
    x = x.transpose(1, 2).contiguous()
    return x.view(*x.shape[:-2], x.shape[-2] * x.shape[-1])


def _init_transformer(model: nn.Module, std: float = 0.02) -> None:
    """HF-style init (normal(0, 0.02) weights), with small random biases so they are not trivially zero."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Linear, Conv1D)):
                m.weight.normal_(0.0, std)
                if m.bias is not None:
                    m.bias.normal_(0.0, std)
            elif isinstance(m, nn.Embedding):
                m.weight.normal_(0.0, std)
            elif isinstance(m, nn.LayerNorm):
                m.weight.uniform_(0.8, 1.2)
                m.bias.normal_(0.0, std)


# --------------------------------------------------------------------------------------------------------------
# BERT-base (transformers.BertModel with pooler)
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12


class BertEmbeddings(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.register_buffer("position_ids", torch.arange(cfg.max_position_embeddings).unsqueeze(0), persistent=False)
        self.register_buffer("token_type_ids", torch.zeros(1, cfg.max_position_embeddings, dtype=torch.long),
                             persistent=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        seq = input_ids.shape[1]
        x = self.word_embeddings(input_ids)
        x = x + self.token_type_embeddings(self.token_type_ids[:, :seq])
        x = x + self.position_embeddings(self.position_ids[:, :seq])
        return self.LayerNorm(x)


class BertSelfAttention(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.n_head = cfg.num_attention_heads
        self.head_dim = cfg.hidden_size // cfg.num_attention_heads
        self.query = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.key = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.value = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = _split_heads(self.query(x), self.n_head)
        k = _split_heads(self.key(x), self.n_head)
        v = _split_heads(self.value(x), self.n_head)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        return _merge_heads(torch.matmul(scores.softmax(dim=-1), v))


class BertSelfOutput(nn.Module):
    def __init__(self, cfg: BertConfig, in_features: int) -> None:
        super().__init__()
        self.dense = nn.Linear(in_features, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, h: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(h) + residual)


class BertAttention(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.self = BertSelfAttention(cfg)
        self.output = BertSelfOutput(cfg, cfg.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(self.self(x), x)


class BertIntermediate(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.dense(x))  # exact (erf) GELU, as HF's "gelu"


class BertLayer(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.attention = BertAttention(cfg)
        self.intermediate = BertIntermediate(cfg)
        self.output = BertSelfOutput(cfg, cfg.intermediate_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.attention(x)
        return self.output(self.intermediate(a), a)


class BertEncoder(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(cfg) for _ in range(cfg.num_hidden_layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layer:
            x = layer(x)
        return x


class BertPooler(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(x[:, 0]))


class BertModel(nn.Module):
    """``forward(input_ids) -> (last_hidden_state, pooler_output)``."""

    def __init__(self, cfg: BertConfig | None = None) -> None:
        super().__init__()
        self.config = cfg = cfg or BertConfig()
        self.embeddings = BertEmbeddings(cfg)
        self.encoder = BertEncoder(cfg)
        self.pooler = BertPooler(cfg)
        _init_transformer(self)

    def forward(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.encoder(self.embeddings(input_ids))
        return h, self.pooler(h)


def bert_base(seed: int = DEFAULT_SEED) -> nn.Module:
    """HF ``BertModel`` (bert-base-uncased config, with pooler): 109,482,240 params."""
    return _seeded(BertModel, seed)


# --------------------------------------------------------------------------------------------------------------
# GPT-2 small (transformers.GPT2LMHeadModel)
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GPT2Config:
    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    layer_norm_epsilon: float = 1e-5


class Conv1D(nn.Module):
    """HF's Conv1D: a linear layer with the weight stored (in_features, out_features); exports as Gemm."""

    def __init__(self, nf: int, nx: int) -> None:
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size_out = (*x.shape[:-1], self.nf)
        x = torch.addmm(self.bias, x.view(-1, x.shape[-1]), self.weight)
        return x.view(size_out)


def _gelu_new(x: torch.Tensor) -> torch.Tensor:
    """GPT-2's tanh-approximated GELU (HF ``gelu_new``)."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Attention(nn.Module):
    def __init__(self, cfg: GPT2Config) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.split_size = cfg.n_embd
        self.head_dim = cfg.n_embd // cfg.n_head
        self.c_attn = Conv1D(3 * cfg.n_embd, cfg.n_embd)
        self.c_proj = Conv1D(cfg.n_embd, cfg.n_embd)
        causal = torch.tril(torch.ones(cfg.n_positions, cfg.n_positions, dtype=torch.bool))
        self.register_buffer("bias", causal.view(1, 1, cfg.n_positions, cfg.n_positions), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.c_attn(x).split(self.split_size, dim=2)
        q, k, v = (_split_heads(t, self.n_head) for t in (q, k, v))
        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        seq = q.shape[-2]
        mask = self.bias[:, :, :seq, :seq]
        w = torch.where(mask, w, torch.tensor(torch.finfo(w.dtype).min, dtype=w.dtype))
        return self.c_proj(_merge_heads(torch.matmul(w.softmax(dim=-1), v)))


class GPT2MLP(nn.Module):
    def __init__(self, cfg: GPT2Config) -> None:
        super().__init__()
        self.c_fc = Conv1D(4 * cfg.n_embd, cfg.n_embd)
        self.c_proj = Conv1D(cfg.n_embd, 4 * cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(_gelu_new(self.c_fc(x)))


class GPT2Block(nn.Module):
    def __init__(self, cfg: GPT2Config) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.attn = GPT2Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.mlp = GPT2MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    def __init__(self, cfg: GPT2Config) -> None:
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.n_positions, cfg.n_embd)
        self.h = nn.ModuleList(GPT2Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.register_buffer("position_ids", torch.arange(cfg.n_positions).unsqueeze(0), persistent=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.wte(input_ids) + self.wpe(self.position_ids[:, : input_ids.shape[1]])
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class GPT2LMHeadModel(nn.Module):
    """``forward(input_ids) -> logits``; the LM head is tied to the token embedding. State-dict keys match HF's."""

    def __init__(self, cfg: GPT2Config | None = None) -> None:
        super().__init__()
        self.config = cfg = cfg or GPT2Config()
        self.transformer = GPT2Model(cfg)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        _init_transformer(self)
        with torch.no_grad():  # GPT-2's scaled init of the residual projections
            for name, p in self.named_parameters():
                if name.endswith("c_proj.weight"):
                    p.normal_(0.0, 0.02 / math.sqrt(2 * cfg.n_layer))
        self.lm_head.weight = self.transformer.wte.weight

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.transformer(input_ids))


def gpt2_small(seed: int = DEFAULT_SEED) -> nn.Module:
    """HF ``GPT2LMHeadModel`` (gpt2 config): 124,439,808 unique params (LM head tied to wte)."""
    return _seeded(GPT2LMHeadModel, seed)


# --------------------------------------------------------------------------------------------------------------
# Tiny models shipped as .onnx files in the repo
# --------------------------------------------------------------------------------------------------------------


class TinyCNN(nn.Module):
    """Conv-BN-ReLU stem, one residual block, MaxPool, Conv-BN-ReLU, global average pool, Linear. Input 3x32x32."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.conv1 = nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        y = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(y)) + x)
        x = self.head(self.pool(x))
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x)


def tiny_cnn(seed: int = DEFAULT_SEED) -> nn.Module:
    return _seeded(TinyCNN, seed)


class TinyBlock(nn.Module):
    """Pre-LN causal self-attention + GELU MLP."""

    def __init__(self, d: int, n_head: int, max_pos: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.register_buffer("mask", torch.tril(torch.ones(max_pos, max_pos, dtype=torch.bool)), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q, k, v = (_split_heads(t, self.n_head) for t in (q, k, v))
        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        seq = q.shape[-2]
        w = w.masked_fill(~self.mask[:seq, :seq], float("-inf"))
        x = x + self.proj(_merge_heads(torch.matmul(w.softmax(dim=-1), v)))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyTransformer(nn.Module):
    """Token + position embedding, 2 pre-LN blocks (d=64, 4 heads, MLP 256), final LN, LM head (vocab 128)."""

    def __init__(self, vocab: int = 128, d: int = 64, n_head: int = 4, n_layer: int = 2, max_pos: int = 128) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_pos, d)
        self.blocks = nn.ModuleList(TinyBlock(d, n_head, max_pos) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)
        self.register_buffer("position_ids", torch.arange(max_pos).unsqueeze(0), persistent=False)
        _init_transformer(self)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(input_ids) + self.pos(self.position_ids[:, : input_ids.shape[1]])
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def tiny_transformer(seed: int = DEFAULT_SEED) -> nn.Module:
    return _seeded(TinyTransformer, seed)


# --------------------------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    factory: Callable[..., nn.Module]
    kind: str  # "image" or "text"
    input_name: str
    output_names: tuple[str, ...]
    default_size: int  # image side for "image", sequence length for "text"
    vocab: int = 0  # text models: token ids are drawn from [0, vocab)
    params: int = 0
    macs: int = 0  # conv+matmul MACs, bias excluded, batch 1, default size


MODELS: dict[str, ModelSpec] = {
    "resnet18": ModelSpec(resnet18, "image", "input", ("logits",), 224, params=11_689_512, macs=1_814_073_344),
    "resnet50": ModelSpec(resnet50, "image", "input", ("logits",), 224, params=25_557_032, macs=4_089_184_256),
    "mobilenet_v2": ModelSpec(mobilenet_v2, "image", "input", ("logits",), 224, params=3_504_872, macs=300_774_272),
    "bert_base": ModelSpec(bert_base, "text", "input_ids", ("last_hidden_state", "pooler_output"), 128, vocab=30522,
                           params=109_482_240, macs=11_174_215_680),
    "gpt2_small": ModelSpec(gpt2_small, "text", "input_ids", ("logits",), 128, vocab=50257,
                            params=124_439_808, macs=16_114_089_984),
    "tiny_cnn": ModelSpec(tiny_cnn, "image", "input", ("logits",), 32, params=10_138, macs=6_340_928),
    "tiny_transformer": ModelSpec(tiny_transformer, "text", "input_ids", ("logits",), 16, vocab=128,
                                  params=124_800, macs=1_769_472),
}

REFERENCE: dict[str, tuple[Callable[..., nn.Module], int]] = {
    name: (MODELS[name].factory, MODELS[name].macs)
    for name in ("resnet18", "resnet50", "mobilenet_v2", "bert_base", "gpt2_small")
}
"""The five published reference models: ``name -> (factory, conv+matmul MACs excluding bias)``.

CNNs at batch 1, 224x224; BERT-base at (1, 128) with pooler; GPT-2 small at (1, 128) with LM head.
"""

SHIPPED: dict[str, tuple[Callable[..., nn.Module], int]] = {
    name: (MODELS[name].factory, MODELS[name].macs) for name in ("tiny_cnn", "tiny_transformer")
}
"""The two tiny models shipped as ``models/<name>.onnx``: ``name -> (factory, MACs at their default input)``."""


def build(name: str, seed: int = DEFAULT_SEED) -> nn.Module:
    return MODELS[name].factory(seed)


def example_inputs(name: str, batch: int = 1, seq: int | None = None, image: int | None = None,
                   seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Deterministic example inputs for ``name``, as a tuple of positional args.

    ``seq`` applies to text models, ``image`` (square side) to image models; ``None`` means the model's default
    (128 for BERT/GPT-2, 16 for tiny_transformer, 224 for the torchvision CNNs, 32 for tiny_cnn).
    """
    spec = MODELS[name]
    g = torch.Generator().manual_seed(seed)
    if spec.kind == "text":
        return (torch.randint(0, spec.vocab, (batch, seq or spec.default_size), generator=g),)
    side = image or spec.default_size
    return (torch.randn(batch, 3, side, side, generator=g),)
