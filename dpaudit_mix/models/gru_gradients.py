"""The CharGRU's per-user gradients, every user at once (user-level DP-SGD's step: models/userdp.py).

One backward pass per user runs GEMMs of a user's few windows, too small to be fast. Here the
recurrence runs once over every sampled user's windows, time-major ``(L, rows, ·)`` so that each
step reads and writes contiguous memory: two GEMMs a step forward (the r and z gates, with x's
part added in, and h's n part), one back, the backward pass through time by hand, no autograd.
A weight's per-user gradient is Σ over that user's rows and steps of (output gradient)ᵀ(input):
the tensors it reads are laid out per user once, ``(users, L·windows, ·)``, and each weight's is
then one ``bmm``; the embedding's is an ``index_add``. Gates follow ``nn.GRU`` (r, z, n):
n = tanh(x W_in + b_in + r ⊙ (h W_hn + b_hn)), h' = (1 − z) ⊙ n + z ⊙ h.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import torch

from ..base.alphabet import V
from .chargru import WINDOW, CharGRU


class _Workspace(threading.local):
    """The pass's buffers, kept between calls (one set per thread): a step on the text world
    needs about 80 MB of them, and asking the allocator afresh each step cost more than the
    step's arithmetic (fresh pages from the OS, faulted in one by one: 20 of a 50 ms step in
    bench/userdp.py). A buffer grows to the largest step seen."""

    def __init__(self) -> None:
        self.buffers: dict[str, torch.Tensor] = {}

    def take(self, name: str, *shape: int, device: torch.device) -> torch.Tensor:
        """An uninitialised float32 tensor of ``shape`` on ``device``, ``name``'s until the next
        call that takes ``name``."""
        size = math.prod(shape)
        held = self.buffers.get(name)
        if held is None or held.numel() < size or held.device != device:
            held = self.buffers[name] = torch.empty(size, device=device)
        return held[:size].view(shape)


_WORKSPACE = _Workspace()


def _weights(model: CharGRU) -> tuple[torch.Tensor, ...]:
    """E (embedding), W_ih, W_hh, b_ih, b_hh, W_head, b_head: the parameters, in their order."""
    return tuple(p.detach() for p in model.parameters())


@dataclass(frozen=True)
class _Rows:
    """Every sampled user's windows, user after user: time-major inputs and targets, and each
    row's user (``owner``)."""

    users: int
    most: int  # the most windows of any one user
    inputs: torch.Tensor  # (L, rows) codes
    targets: torch.Tensor  # (L, rows) codes, −1 where nothing is scored
    owner: torch.Tensor
    lengths: tuple[int, ...]  # each user's windows

    @classmethod
    def of(cls, users: list[torch.Tensor]) -> _Rows:
        device = users[0].device
        lengths = tuple(len(u) for u in users)
        windows = torch.cat(users)  # (rows, L + 1)
        owner = torch.repeat_interleave(torch.arange(len(users), device=device), torch.tensor(lengths, device=device))
        inputs = windows[:, :-1].clamp(min=0).T.contiguous()
        return cls(len(users), max(lengths), inputs, windows[:, 1:].T, owner, lengths)

    @property
    def rows(self) -> int:
        return len(self.owner)

    def take(self, name: str, *shape: int) -> torch.Tensor:
        return _WORKSPACE.take(name, *shape, device=self.inputs.device)

    def per_user(self, name: str, t: torch.Tensor) -> torch.Tensor:
        """(users, steps, windows, ·) from time-major (steps, rows, ·): a user's rows at every step
        together, zero where a user has fewer windows than the most (one block copy per user:
        faster here than a scatter of rows, 0.86 against 1.46 ms for the step's largest)."""
        steps, width = t.shape[0], t.shape[-1]
        laid = self.take(name, self.users, steps, self.most, width)
        if self.rows == self.users * self.most:
            return laid.copy_(t.view(steps, self.users, self.most, width).transpose(0, 1))
        start = 0
        for u, length in enumerate(self.lengths):
            laid[u, :, :length] = t[:, start : start + length]
            laid[u, :, length:] = 0
            start += length
        return laid


@dataclass(frozen=True)
class _Forward:
    """What the backward pass reads: each step's h (``states``, h_0 = 0 first), gates and h's n part."""

    x: torch.Tensor  # (L·rows, E): the embedded inputs
    states: torch.Tensor  # (L + 1, rows, H)
    r: torch.Tensor  # (L, rows, H)
    z: torch.Tensor
    n: torch.Tensor
    gh_n: torch.Tensor  # h W_hn + b_hn, before r multiplies it


def _forward(model: CharGRU, rows: _Rows) -> _Forward:
    emb, w_ih, w_hh, b_ih, b_hh, _, _ = _weights(model)
    hidden, n_rows = w_hh.shape[1], rows.rows
    rz = slice(0, 2 * hidden)  # the r and z gates' rows of W_ih and W_hh; n's follow
    x = torch.index_select(emb, 0, rows.inputs.reshape(-1), out=rows.take("x", WINDOW * n_rows, emb.shape[1]))
    bias = torch.cat([b_ih[rz] + b_hh[rz], b_ih[2 * hidden :]])  # h's r and z biases added in once
    gates_x = torch.addmm(bias, x, w_ih.T, out=rows.take("gates_x", WINDOW * n_rows, 3 * hidden))
    gates_x = gates_x.view(WINDOW, n_rows, -1)
    w_rz, w_n, b_n = w_hh[rz].T, w_hh[2 * hidden :].T, b_hh[2 * hidden :]
    states = rows.take("states", WINDOW + 1, n_rows, hidden)
    states[0] = 0
    rz_all = rows.take("rz", WINDOW, n_rows, 2 * hidden)
    n_all, gh_n_all = rows.take("n", WINDOW, n_rows, hidden), rows.take("gh_n", WINDOW, n_rows, hidden)
    h = states[0]
    for t in range(WINDOW):
        gate = torch.sigmoid_(torch.addmm(gates_x[t, :, rz], h, w_rz, out=rz_all[t]))
        gh_n = torch.addmm(b_n, h, w_n, out=gh_n_all[t])
        n = torch.addcmul(gates_x[t, :, 2 * hidden :], gate[:, :hidden], gh_n, out=n_all[t])
        n.mul_(2).sigmoid_().mul_(2).sub_(1)  # tanh a = 2σ(2a) − 1: torch's CPU tanh is 9× its sigmoid here
        h = torch.lerp(n, h, gate[:, hidden:], out=states[t + 1])  # (1 − z) n + z h
    return _Forward(x, states, rz_all[..., :hidden], rz_all[..., hidden:], n_all, gh_n_all)


def _d_logits(model: CharGRU, rows: _Rows, fwd: _Forward) -> torch.Tensor:
    """d(Σ_w NLL_w / scored_w)/d logits = (softmax − one-hot) / scored, 0 where the target is padding."""
    w_head, b_head = _weights(model)[5:]
    out = fwd.states[1:].reshape(-1, w_head.shape[1])
    logits = torch.addmm(b_head, out, w_head.T, out=rows.take("logits", len(out), V))
    d_logits = torch.softmax(logits, dim=1, out=rows.take("d_logits", len(out), V))
    scored = rows.targets >= 0
    d_logits[torch.arange(len(out), device=out.device), rows.targets.clamp(min=0).reshape(-1)] -= 1
    return d_logits.mul_((scored / scored.sum(dim=0).clamp(min=1)).reshape(-1, 1))


def _through_time(model: CharGRU, rows: _Rows, fwd: _Forward, d_out: torch.Tensor) -> torch.Tensor:
    """(L, rows, 4H): the pre-activations' gradients at each step, in the blocks [d_r, d_z, d_hn,
    d_n]: d(a_r), d(a_z), d(h W_hn + b_hn), d(a_n); the first three are d(h W_hh + b_hh)."""
    w_hh = _weights(model)[2]
    hidden, n_rows, z, r = w_hh.shape[1], rows.rows, fwd.z, fwd.r
    # each step's local derivatives, all steps at once (in place: a − a·b is a(1 − b)):
    # ∂h/∂a_n = (1 − z)(1 − n²), ∂h/∂a_z = (h_prev − n) z (1 − z), ∂a_n/∂a_r = gh_n r (1 − r)
    through_n = torch.mul(fwd.n, fwd.n, out=rows.take("through_n", WINDOW, n_rows, hidden)).neg_().add_(1)
    through_n.addcmul_(through_n, z, value=-1)
    through_z = torch.sub(fwd.states[:-1], fwd.n, out=rows.take("through_z", WINDOW, n_rows, hidden)).mul_(z)
    through_z.addcmul_(through_z, z, value=-1)
    through_r = torch.mul(fwd.gh_n, r, out=rows.take("through_r", WINDOW, n_rows, hidden))
    through_r.addcmul_(through_r, r, value=-1)
    d_gates = rows.take("d_gates", WINDOW, n_rows, 4 * hidden)
    d_h = d_out[-1]
    for t in reversed(range(WINDOW)):
        d_gh, d_n = d_gates[t, :, : 3 * hidden], d_gates[t, :, 3 * hidden :]
        torch.mul(d_h, through_n[t], out=d_n)
        torch.mul(d_n, through_r[t], out=d_gh[:, :hidden])
        torch.mul(d_h, through_z[t], out=d_gh[:, hidden : 2 * hidden])
        torch.mul(d_n, r[t], out=d_gh[:, 2 * hidden :])
        if t:
            d_h = torch.addmm(torch.addcmul(d_out[t - 1], d_h, z[t]), d_gh, w_hh)
    return d_gates


def char_gru_gradients(model: CharGRU, users: list[torch.Tensor]) -> torch.Tensor:
    """(B, P): each of the B users' gradient of Σ over their windows of the mean NLL per scored
    character, in ``model.parameters()`` order: what one backward pass per user gives
    (``userdp.user_gradient``), to float rounding.

    Args:
        model: the CharGRU, every parameter trainable.
        users: each user's windows, (m_u, WINDOW + 1) codes, m_u ≥ 1.

    Returns:
        The per-user gradients, one row per user, float32.
    """
    rows = _Rows.of(users)
    _, w_ih, _, _, _, w_head, _ = _weights(model)
    hidden, count = w_head.shape[1], rows.users
    with torch.no_grad():
        fwd = _forward(model, rows)
        d_logits = _d_logits(model, rows, fwd)
        d_out = torch.mm(d_logits, w_head, out=rows.take("d_out", len(d_logits), hidden)).view(WINDOW, -1, hidden)
        d_gates = _through_time(model, rows, fwd, d_out)
        # d(x W_ih + b_ih) is [d_r, d_z, d_n]; d(h W_hh + b_hh) is [d_r, d_z, d_hn]
        blocks = d_gates.view(-1, 4 * hidden)
        d_x = torch.mm(blocks[:, 3 * hidden :], w_ih[2 * hidden :], out=rows.take("d_x", len(fwd.x), fwd.x.shape[1]))
        d_x.addmm_(blocks[:, : 2 * hidden], w_ih[: 2 * hidden])
        g_emb = torch.zeros(count * V, fwd.x.shape[1], device=d_x.device)
        g_emb.index_add_(0, (rows.owner * V + rows.inputs).reshape(-1), d_x)
        states_u = rows.per_user("states_u", fwd.states)  # (users, L + 1, windows, H)
        d_gh = rows.per_user("d_gh_u", d_gates[..., : 3 * hidden]).flatten(1, 2)  # contiguous: the bmm is faster
        d_rz, d_n = d_gh[..., : 2 * hidden], rows.per_user("d_n_u", d_gates[..., 3 * hidden :]).flatten(1, 2)
        x_u = rows.per_user("x_u", fwd.x.view(WINDOW, rows.rows, -1)).flatten(1, 2)
        d_logits_u = rows.per_user("d_logits_u", d_logits.view(WINDOW, rows.rows, -1)).flatten(1, 2)
        parts = [
            g_emb,
            torch.cat([torch.bmm(d_rz.transpose(1, 2), x_u), torch.bmm(d_n.transpose(1, 2), x_u)], dim=1),
            torch.bmm(d_gh.transpose(1, 2), states_u[:, :-1].flatten(1, 2)),
            torch.cat([d_rz.sum(1), d_n.sum(1)], dim=1),
            d_gh.sum(1),
            torch.bmm(d_logits_u.transpose(1, 2), states_u[:, 1:].flatten(1, 2)),
            d_logits_u.sum(1),
        ]
        return torch.cat([part.reshape(count, -1) for part in parts], dim=1)
