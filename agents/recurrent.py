"""sb3-contrib's ``RecurrentPPO``, able to train on ``MultiBinary`` actions.

Its rollout buffer keeps actions in the action space's dtype. A ``MultiBinary`` space's are int8,
and its Bernoulli log-probability then fails in ``binary_cross_entropy_with_logits`` ("result
type Float can't be cast to the desired output type Char"), on the selection envs' first update.
SB3's own buffers hand actions out as float32; :class:`RecurrentPPO` keeps them so.
"""

from __future__ import annotations

import numpy as np
import sb3_contrib
from sb3_contrib.common.recurrent.buffers import RecurrentRolloutBuffer


class FloatActionsBuffer(RecurrentRolloutBuffer):
    """A recurrent rollout buffer whose actions are float32, whatever the action space's dtype."""

    def reset(self) -> None:
        """Empty the buffer (SB3's), its actions float32."""
        super().reset()
        self.actions = self.actions.astype(np.float32, copy=False)


class RecurrentPPO(sb3_contrib.RecurrentPPO):
    """sb3-contrib's ``RecurrentPPO`` with a :class:`FloatActionsBuffer` (module docstring)."""

    def _setup_model(self) -> None:
        super()._setup_model()
        old = self.rollout_buffer
        if type(old) is RecurrentRolloutBuffer:  # a Dict observation's buffer is left as it is
            self.rollout_buffer = FloatActionsBuffer(
                old.buffer_size, old.observation_space, old.action_space, old.hidden_state_shape, old.device,
                gae_lambda=old.gae_lambda, gamma=old.gamma, n_envs=old.n_envs)
