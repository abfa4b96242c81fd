#!/usr/bin/env python3
"""PyTorch twins of ctrbox's architectures (docs/model.md, "Architectures"): the shared
baseline's reference model (shared/baselines/torch_ctr.py: its data reading, lossless
embedding rows, optimizers, timing and AUC) with the interaction ctrbox composes with it:

  mlp      the reference model itself
  deepfm   + a wide (first-order) weight per key and the FM second-order term on the logit
  dcn_v2   --cross-layers cross layers x_{l+1} = x0 * (x_l W_l + b_l) + x_l before the MLP
           (full-rank W_l, Glorot-uniform, zero bias: DCN-v2's stacked form)
  dcn_v2_lr  the same with W_l = U_l V_l^T of rank --cross-rank (64)
  dlrm     the pairwise dot products of the 26 pooled embeddings appended to the MLP's input
  dlrm_bottom  DLRM with its bottom MLP (--bottom-mlp, ReLU layers, the last as wide as an
           embedding): its output z replaces the dense features and joins the dot products
  dcn_mix  DCN-v2's mixture of --cross-experts low-rank experts per cross layer (rank
           --cross-rank): x_{l+1} = sum_k softmax(x_l Wg)_k x0 * (relu(relu(x_l V_k) C_k) U_k + b)
           + x_l (V, C, U, Wg Glorot-uniform, b zero)
  aibox    AIBox's joint learning: --towers MLP towers of --mlp's widths; tower t reads the
           input without the other towers' --dense-groups, plus the first and last hidden
           layers of every earlier tower; one linear output over their last hidden layers
  slot_dims  the reference model with per-slot embedding dimensions (--slot-dims, ctrbox's
           model.slot_dims syntax; other slots --dim): one embedding table per dimension,
           holding the rows of its slots, each slot pooled at its own width into the MLP

Sparse rows (embeddings and wide weights) train with Adagrad, the dense layers with Adam, as
in the baseline. Only the training loop is timed. Prints one JSON line.

  torch_twins.py --arch dcn_v2 --train train.tsv --test test.tsv [--threads 2] [--device cuda]
"""
import argparse, json, os, sys, time

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "shared", "baselines"))
from torch_ctr import DENSE, SLOTS, auc, read_tsv  # noqa: E402


class Twin(nn.Module):
    def __init__(self, arch, rows, dim, mlp, cross_layers, cross_rank, bottom_mlp, towers=0, dense_groups=(),
                 cross_experts=4, tower_mlp=None, slot_tables=None):
        super().__init__()
        self.arch = arch
        self.emb = nn.Embedding(rows, dim, sparse=True)
        nn.init.uniform_(self.emb.weight, -0.01, 0.01)
        # slot_dims: (per slot its table, per table (dim, rows), and the global id -> table row).
        self.slot_tables = slot_tables
        if slot_tables is not None:
            slot_table, tables, remap = slot_tables
            self.emb = nn.Embedding(1, 1, sparse=True)  # unused
            self.tables = nn.ModuleList()
            for d, n in tables:
                t = nn.Embedding(n, d, sparse=True)
                nn.init.uniform_(t.weight, -0.01, 0.01)
                self.tables.append(t)
            self.register_buffer("remap", remap, persistent=False)
        self.wide = None
        if arch == "deepfm":
            self.wide = nn.Embedding(rows, 1, sparse=True)
            nn.init.zeros_(self.wide.weight)
        self.bottom = nn.Sequential()
        if arch == "dlrm_bottom":
            width = DENSE
            for h in bottom_mlp:
                self.bottom.append(nn.Linear(width, h))
                self.bottom.append(nn.ReLU())
                width = h
            assert width == dim, "the bottom MLP must end at the embedding dimension"
        w0 = (dim if arch == "dlrm_bottom" else DENSE) + SLOTS * dim
        if slot_tables is not None:
            w0 = DENSE + sum(slot_tables[1][t][0] for t in slot_tables[0])
        self.cross = nn.ModuleList()
        if arch == "dcn_v2":
            for _ in range(cross_layers):
                lin = nn.Linear(w0, w0)
                nn.init.xavier_uniform_(lin.weight)
                nn.init.zeros_(lin.bias)
                self.cross.append(lin)
        if arch == "dcn_v2_lr":
            for _ in range(cross_layers):
                v, u = nn.Linear(w0, cross_rank, bias=False), nn.Linear(cross_rank, w0)
                nn.init.xavier_uniform_(v.weight)
                nn.init.xavier_uniform_(u.weight)
                nn.init.zeros_(u.bias)
                self.cross.append(nn.Sequential(v, u))
        if arch == "dcn_mix":
            def glorot(n_in, n_out, count=()):
                t = torch.empty(*count, n_in, n_out)
                bound = (6.0 / (n_in + n_out)) ** 0.5
                return nn.Parameter(t.uniform_(-bound, bound))
            self.mix = nn.ModuleList()
            for _ in range(cross_layers):
                layer = nn.Module()
                layer.V = glorot(w0, cross_rank, (cross_experts,))
                layer.C = glorot(cross_rank, cross_rank, (cross_experts,))
                layer.U = glorot(cross_rank, w0, (cross_experts,))
                layer.G = glorot(w0, cross_experts)
                layer.b = nn.Parameter(torch.zeros(w0))
                self.mix.append(layer)
            self.cross = self.mix  # its parameters are dense parameters
        width = w0
        if arch in ("dlrm", "dlrm_bottom"):
            n = SLOTS + (1 if arch == "dlrm_bottom" else 0)
            self.pairs = torch.triu_indices(n, n, offset=1)
            width += self.pairs.shape[1]
        self.towers = nn.ModuleList()
        if arch == "aibox":
            # Tower t's base columns: all but the dense features of the other towers' groups.
            owner = {d: g for g, group in enumerate(dense_groups) for d in group}
            self.tower_cols = [torch.tensor([c for c in range(w0) if owner.get(c, t) == t])
                               for t in range(towers)]
            shapes = tower_mlp or [mlp] * towers
            taps = 0  # earlier towers' h1 (and hL) columns
            for t in range(towers):
                width, layers = len(self.tower_cols[t]) + taps, nn.ModuleList()
                for h in shapes[t]:
                    layers.append(nn.Linear(width, h))
                    width = h
                self.towers.append(layers)
                taps += shapes[t][0] + (shapes[t][-1] if len(shapes[t]) > 1 else 0)
            self.mlp = nn.Linear(sum(s[-1] for s in shapes), 1)  # the output unit
            return
        layers = []
        for h in mlp:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, 1))
        self.mlp = nn.Sequential(*layers)

    def sparse_parameters(self):
        if self.slot_tables is not None:
            return list(self.tables.parameters())
        return list(self.emb.parameters()) + (list(self.wide.parameters()) if self.wide is not None else [])

    def dense_parameters(self):
        return (list(self.mlp.parameters()) + list(self.cross.parameters()) + list(self.bottom.parameters()) +
                list(self.towers.parameters()))

    def forward(self, dense, cats):
        if self.slot_tables is not None:  # each slot from its table, at its own width
            rows = self.remap[cats]  # [B, SLOTS]: rows of the slots' tables
            parts = [self.tables[t](rows[:, s]) for s, t in enumerate(self.slot_tables[0])]
            return self.mlp(torch.cat([dense] + parts, dim=1)).squeeze(1)
        e = self.emb(cats)  # [B, SLOTS, dim]
        if self.arch == "dlrm_bottom":
            z = self.bottom(dense)
            x0 = torch.cat([z, e.flatten(1)], dim=1)
            vecs = torch.cat([z.unsqueeze(1), e], dim=1)
        else:
            x0 = torch.cat([dense, e.flatten(1)], dim=1)
            vecs = e
        x = x0
        if self.arch == "dcn_mix":
            for m in self.mix:
                gates = torch.softmax(x @ m.G, dim=1)                     # [B, K]
                a = torch.relu(torch.einsum("bw,kwr->kbr", x, m.V))
                c = torch.relu(torch.bmm(a, m.C))                         # [K, B, r]
                e = x0.unsqueeze(0) * (torch.bmm(c, m.U) + m.b)           # [K, B, W0]
                x = torch.einsum("bk,kbw->bw", gates, e) + x
        else:
            for lin in self.cross:
                x = x0 * lin(x) + x
        if self.arch in ("dlrm", "dlrm_bottom"):
            dots = torch.bmm(vecs, vecs.transpose(1, 2))[:, self.pairs[0].to(e.device), self.pairs[1].to(e.device)]
            x = torch.cat([x, dots], dim=1)
        if self.arch == "aibox":
            taps, lasts = [], []
            for t, layers in enumerate(self.towers):
                h = torch.cat([x[:, self.tower_cols[t].to(x.device)]] + taps, dim=1)
                for i, lin in enumerate(layers):
                    h = torch.relu(lin(h))
                    if i == 0:
                        first = h
                taps += [first, h] if len(layers) > 1 else [h]
                lasts.append(h)
            x = torch.cat(lasts, dim=1)
        logit = self.mlp(x).squeeze(1)
        if self.arch == "deepfm":
            s = e.sum(dim=1)
            logit = logit + self.wide(cats).sum(dim=(1, 2)) + 0.5 * (s * s - (e * e).sum(dim=1)).sum(dim=1)
        return logit


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", required=True,
                    choices=["mlp", "deepfm", "dcn_v2", "dcn_v2_lr", "dlrm", "dlrm_bottom", "aibox", "dcn_mix",
                             "slot_dims"])
    ap.add_argument("--slot-dims", default="",
                    help="slot_dims: slots:dim groups by ',', slots as indices or ranges joined by '+' "
                         "(ctrbox's model.slot_dims); other slots --dim")
    ap.add_argument("--cross-experts", type=int, default=4)
    ap.add_argument("--towers", type=int, default=2)
    ap.add_argument("--tower-mlp", default="",
                    help="aibox: each tower's own widths, '-' joined, towers by ',' (default: --mlp)")
    ap.add_argument("--dense-groups", default="0-6,7-12",
                    help="aibox: each tower's dense features, ranges joined by '+', groups by ','")
    ap.add_argument("--bottom-mlp", default="64,16")
    ap.add_argument("--train", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--mlp", default="512,256,128")
    ap.add_argument("--cross-layers", type=int, default=2)
    ap.add_argument("--cross-rank", type=int, default=64)
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--sparse-lr", type=float, default=0.05)
    ap.add_argument("--dense-lr", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    if a.threads:
        torch.set_num_threads(a.threads)
    vocab = {}
    ytr, dtr, ctr = read_tsv(a.train, vocab)
    yte, dte, cte = read_tsv(a.test, vocab)
    mlp = [int(x) for x in a.mlp.split(",")] if a.mlp else []
    dev = torch.device(a.device)
    groups = []
    for g in a.dense_groups.split(",") if a.dense_groups else []:
        group = []
        for item in g.split("+"):
            lo, _, hi = item.partition("-")
            group += list(range(int(lo), int(hi or lo) + 1))
        groups.append(group)
    slot_tables = None
    if a.arch == "slot_dims":
        # Tables as ctrbox numbers them: table 0 of --dim, then each new dimension in order.
        slot_dim = [a.dim] * SLOTS
        for g in a.slot_dims.split(","):
            slots, _, d = g.partition(":")
            for item in slots.split("+"):
                lo, _, hi = item.partition("-")
                for s in range(int(lo), int(hi or lo) + 1):
                    slot_dim[s] = int(d)
        dims = [a.dim] + [d for i, d in enumerate(slot_dim) if d != a.dim and d not in slot_dim[:i]]
        slot_table = [dims.index(d) for d in slot_dim]
        remap = torch.empty(len(vocab), dtype=torch.int64)
        counts = [0] * len(dims)
        for (s, _), idx in vocab.items():
            t = slot_table[s]
            remap[idx] = counts[t]
            counts[t] += 1
        slot_tables = (slot_table, [(d, max(c, 1)) for d, c in zip(dims, counts)], remap)
    model = Twin(a.arch, len(vocab), a.dim, mlp, a.cross_layers, a.cross_rank,
                 [int(x) for x in a.bottom_mlp.split(",")], a.towers, groups, a.cross_experts,
                 [[int(w) for w in s.split("-")] for s in a.tower_mlp.split(",")] if a.tower_mlp else None,
                 slot_tables).to(dev)
    sparse_opt = torch.optim.Adagrad(model.sparse_parameters(), lr=a.sparse_lr)
    dense_opt = torch.optim.Adam(model.dense_parameters(), lr=a.dense_lr)
    loss_fn = nn.BCEWithLogitsLoss()
    ytr, dtr, ctr = ytr.to(dev), dtr.to(dev), ctr.to(dev)
    n = len(ytr)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    model.train()
    for i in range(0, n, a.batch):
        loss = loss_fn(model(dtr[i:i + a.batch], ctr[i:i + a.batch]), ytr[i:i + a.batch])
        sparse_opt.zero_grad(); dense_opt.zero_grad()
        loss.backward()
        sparse_opt.step(); dense_opt.step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    model.eval()
    with torch.no_grad():
        scores = torch.cat([torch.sigmoid(model(dte[i:i + 65536].to(dev), cte[i:i + 65536].to(dev))).cpu()
                            for i in range(0, len(yte), 65536)]).numpy()
    y = yte.numpy()
    p = np.clip(scores, 1e-7, 1 - 1e-7)
    print(json.dumps({"system": f"pytorch-{torch.__version__}", "arch": a.arch, "device": a.device,
                      "threads": torch.get_num_threads(),
                      "train_rows": n, "train_seconds": round(secs, 3), "train_examples_per_s": round(n / secs, 1),
                      "auc": round(auc(y, scores), 5),
                      "logloss": round(float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))), 5),
                      "dense_params": sum(t.numel() for t in model.dense_parameters()),
                      "embedding_rows": len(vocab),
                      "embedding_values": sum(t.numel() for t in model.sparse_parameters())}))


if __name__ == "__main__":
    main()
