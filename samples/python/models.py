"""The models of the Python training sample (train.py), each with its
synthetic data: a small GPT (token ids in, next-token loss) and ResNet-50
(images in, class loss), both written here so the sample needs PyTorch alone.
Every model's forward takes a batch (inputs, targets) and returns the loss."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, seq, dim, heads, layers):
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Parameter(torch.zeros(1, seq, dim))
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx, targets):
        x = self.tokens(idx) + self.positions[:, : idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


class Bottleneck(nn.Module):
    """ResNet-50's block: 1x1 down to `width`, 3x3 (carrying the stride), 1x1
    up to 4 x width, batch norm after each, the shortcut projected where the
    shape changes."""

    def __init__(self, inputs, width, stride):
        super().__init__()
        out = 4 * width
        self.conv1, self.bn1 = nn.Conv2d(inputs, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out)
        self.shortcut = None
        if stride != 1 or inputs != out:
            self.shortcut = nn.Sequential(nn.Conv2d(inputs, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (x if self.shortcut is None else self.shortcut(x)))


class ResNet50(nn.Module):
    """He et al.'s ResNet-50 for ImageNet-sized inputs: 25.6 M parameters."""

    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        stages, inputs = [], 64
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(blocks):
                stages.append(Bottleneck(inputs, width, stride if i == 0 else 1))
                inputs = 4 * width
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(inputs, classes)

    def forward(self, images, labels):
        x = self.stages(self.stem(images))
        return F.cross_entropy(self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)), labels)


def build(a):
    """The model `a.model` names, at the sizes of the options."""
    if a.model == "gpt":
        return GPT(a.vocab, a.seq, a.dim, a.heads, a.layers)
    return ResNet50()


def synthetic_data(a, batches, generator):
    """`batches` batches of inputs and targets (CPU tensors, drawn from
    `generator`): token ids for the GPT, images of a.image pixels square and
    labels for ResNet-50."""
    if a.model == "gpt":
        tokens = torch.randint(a.vocab, (batches, a.batch, a.seq + 1), generator=generator)
        return tokens[:, :, :-1].contiguous(), tokens[:, :, 1:].contiguous()
    images = torch.randn((batches, a.batch, 3, a.image, a.image), generator=generator)
    return images, torch.randint(1000, (batches, a.batch), generator=generator)


def describe(a, n_params):
    if a.model == "gpt":
        return (f"GPT {a.layers} layers x {a.dim}, {n_params / 1e6:.1f} M parameters, {a.batch} x {a.seq} tokens "
                f"per rank")
    return f"ResNet-50, {n_params / 1e6:.1f} M parameters, {a.batch} images of {a.image} x {a.image} per rank"
