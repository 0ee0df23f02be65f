import torch
import torch.nn as nn


class Model(nn.Module):
    """
    A transformer self-attention block (post-norm), in float32:
      q, k, v = split(x @ W_qkv + b_qkv) into num_heads heads of head_dim
      attn    = softmax(q @ k^T / sqrt(head_dim)) @ v          (no mask, no dropout)
      out     = LayerNorm(x + merge_heads(attn) @ W_out + b_out)
    The attention is written out with matmul and softmax, so the (seq_len x seq_len) score
    matrix of every head is materialised.

    Roofline estimate for one H100 (fp32 without TF32 at 51.7 TFLOP/s, memory at 3.0 TB/s),
    an estimate and not a measurement; each op counted on its own, each tensor it reads or
    writes counted once (the scores take 537 MB):
      FLOPs: qkv 51.5 G, q @ k^T 17.2 G, attn @ v 17.2 G, output projection 17.2 G = 103.8 GFLOP
      bytes: 2802 MB over the nine ops
      per op: qkv 1.00 ms, scale 0.02 ms, q @ k^T 0.33 ms, softmax 0.36 ms, attn @ v 0.33 ms,
              merge heads 0.02 ms, output projection 0.33 ms, residual add 0.03 ms,
              LayerNorm 0.02 ms
      estimate: 2.45 ms
    """
    def __init__(self, embed_dim, num_heads):
        super(Model, self).__init__()
        assert embed_dim % num_heads == 0
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.qkv = nn.Linear(embed_dim, 3 * embed_dim)
        self.out = nn.Linear(embed_dim, embed_dim)
        self.norm = nn.LayerNorm(embed_dim)

    def forward(self, x):
        """
        Args:
            x (torch.Tensor): (batch_size, seq_len, embed_dim)
        Returns:
            torch.Tensor: same shape as x
        """
        b, s, e = x.shape
        qkv = self.qkv(x).view(b, s, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # each (b, heads, s, head_dim)
        q = q * self.head_dim ** -0.5
        scores = torch.matmul(q, k.transpose(-2, -1))  # (b, heads, s, s)
        weights = torch.softmax(scores, dim=-1)
        attn = torch.matmul(weights, v)  # (b, heads, s, head_dim)
        attn = attn.transpose(1, 2).reshape(b, s, e)
        return self.norm(x + self.out(attn))


batch_size = 8
seq_len = 1024
embed_dim = 1024
num_heads = 16


def get_inputs():
    return [torch.randn(batch_size, seq_len, embed_dim)]


def get_init_inputs():
    return [embed_dim, num_heads]
