"""Advantage estimators and policy losses by name, each with one calling convention.

Register a new estimator with a decorator::

    @register_advantage_estimator("my_estimator")
    def compute_my_estimator(token_level_rewards, response_mask, index, *, temperature=1.0):
        ...
        return advantages, returns

and call any estimator the same way::

    estimator = get_advantage_estimator(name)
    advantages, returns = estimator(
        token_level_rewards=rewards, response_mask=mask,
        values=values, index=group_ids, turn_end_mask=turn_ends,  # given when available
        bootstrap_value=v_boot, advantage_mask=adv_mask,           # optional
        gamma=1.0, lam=1.0, ...,                                   # any estimator's hypers
    )

The call passes each estimator only the data inputs its function declares (``DATA_ARGS``:
``values``, ``index``, ``turn_end_mask``, ``bootstrap_value``, ``advantage_mask``; e.g.
the critic estimators take ``bootstrap_value``, the outcome estimators such as ``grpo``
do not, since a trajectory score has no next state to bootstrap from, and only
``masked_gae`` takes ``advantage_mask``), and only the hyper-parameters it declares: a
hyper-parameter that *some* registered estimator takes is dropped silently (so one
config can serve every estimator), while an unknown name raises ``TypeError`` (a typo
such as ``lamda`` never goes unnoticed). Whether an estimator needs a critic, turn ends
or group ids is read from its signature (a parameter ``values``, ``turn_end_mask`` or
``index`` without a default) unless given to the decorator. What each estimator needs
is also what config validation asks (``ragen.trainer.config``): no list of names there.

The built-in estimators (``ragen.algo.gae``, ``outcome``) and the policy loss
(``ragen.algo.losses``) register themselves when imported; ``ragen/algo/__init__.py``
imports them, and Python runs it before any ``ragen.algo.*`` module, so the registries
are full whichever module asks. A policy loss registers the same way::

    @register_policy_loss("my_loss")
    def my_loss(old_log_prob, log_prob, advantages, response_mask, *, loss_agg_mode,
                norm_constant, denominator, my_knob=1.0):
        ...
        return loss, metrics

and ``algo.policy_loss=my_loss`` selects it; the trainer passes the ``algo.*`` values of
the hyper-parameters it declares (``clip_ratio_low``, ...).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

__all__ = [
    "AdvantageEstimator",
    "register_advantage_estimator",
    "get_advantage_estimator",
    "list_advantage_estimators",
    "needs_critic",
    "PolicyLoss",
    "register_policy_loss",
    "get_policy_loss",
    "list_policy_losses",
]

# The standard inputs a trainer has; everything else an estimator takes is a hyper-parameter.
DATA_ARGS = (
    "token_level_rewards",
    "response_mask",
    "values",
    "index",
    "turn_end_mask",
    "bootstrap_value",  # (B,) V after each sample's last response token (critic estimators)
    "advantage_mask",  # (B, T) tokens of the GAE recursion (masked_gae's M_adv)
)

_REGISTRY: dict[str, AdvantageEstimator] = {}


@dataclass(frozen=True)
class AdvantageEstimator:
    """A registered estimator: the function plus what it needs, callable with keywords."""

    name: str
    fn: Callable[..., tuple[Tensor, Tensor]]
    needs_critic: bool
    needs_turn_ends: bool
    needs_index: bool
    data_params: tuple[str, ...]  # the DATA_ARGS that fn declares
    hyper_params: tuple[str, ...]  # fn's other parameters

    def __call__(
        self,
        *,
        token_level_rewards: Tensor,
        response_mask: Tensor,
        values: Tensor | None = None,
        index=None,
        turn_end_mask: Tensor | None = None,
        bootstrap_value: Tensor | None = None,
        advantage_mask: Tensor | None = None,
        **hyper,
    ) -> tuple[Tensor, Tensor]:
        """Run the estimator -> ``(advantages, returns)``, each ``(batch, seq)`` float32.

        Data inputs the estimator does not declare are dropped (None or not).
        """
        given = {
            "token_level_rewards": token_level_rewards,
            "response_mask": response_mask,
            "values": values,
            "index": index,
            "turn_end_mask": turn_end_mask,
            "bootstrap_value": bootstrap_value,
            "advantage_mask": advantage_mask,
        }
        for flag, arg, what in (
            (self.needs_critic, "values", "critic values"),
            (self.needs_index, "index", "group ids (index)"),
            (self.needs_turn_ends, "turn_end_mask", "a turn_end_mask"),
        ):
            if flag and given[arg] is None:
                raise ValueError(f"advantage estimator {self.name!r} needs {what}; pass {arg}=...")
        kwargs = {k: v for k, v in given.items() if k in self.data_params}
        known = _all_hyper_params()
        for key, value in hyper.items():
            if key in self.hyper_params:
                kwargs[key] = value
            elif key not in known:
                raise TypeError(
                    f"unknown hyper-parameter {key!r} for advantage estimator {self.name!r}; "
                    f"it takes {sorted(self.hyper_params)}, others take {sorted(known)}"
                )
        return self.fn(**kwargs)


def _all_hyper_params() -> set[str]:
    return {p for est in _REGISTRY.values() for p in est.hyper_params}


def register_advantage_estimator(
    name: str,
    *,
    needs_critic: bool | None = None,
    needs_turn_ends: bool | None = None,
    needs_index: bool | None = None,
    overwrite: bool = False,
) -> Callable[[Callable], Callable]:
    """Decorator registering ``fn`` under ``name`` (returns ``fn`` unchanged).

    ``fn`` must take ``token_level_rewards`` and ``response_mask`` and return
    ``(advantages, returns)``. The ``needs_*`` flags default to "the function has a
    required parameter named values / turn_end_mask / index". Registering an existing
    name raises ``ValueError`` unless ``overwrite=True``.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"estimator name must be a non-empty string, got {name!r}")

    def decorator(fn: Callable) -> Callable:
        if name in _REGISTRY and not overwrite and _REGISTRY[name].fn is not fn:
            raise ValueError(
                f"advantage estimator {name!r} is already registered; pass overwrite=True"
            )
        params = inspect.signature(fn).parameters
        for required in ("token_level_rewards", "response_mask"):
            if required not in params:
                raise TypeError(f"estimator {name!r} must take a {required!r} parameter")

        def required_param(arg: str) -> bool:
            return arg in params and params[arg].default is inspect.Parameter.empty

        _REGISTRY[name] = AdvantageEstimator(
            name=name,
            fn=fn,
            needs_critic=required_param("values") if needs_critic is None else needs_critic,
            needs_turn_ends=(
                required_param("turn_end_mask") if needs_turn_ends is None else needs_turn_ends
            ),
            needs_index=required_param("index") if needs_index is None else needs_index,
            data_params=tuple(p for p in params if p in DATA_ARGS),
            hyper_params=tuple(
                p
                for p, spec in params.items()
                if p not in DATA_ARGS
                and spec.kind
                not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
            ),
        )
        return fn

    return decorator


def get_advantage_estimator(name: str) -> AdvantageEstimator:
    """The estimator registered as ``name``; ``KeyError`` listing the names otherwise."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(
            f"unknown advantage estimator {name!r}; available: {', '.join(sorted(_REGISTRY))}"
        ) from None


def list_advantage_estimators() -> list[str]:
    """Sorted names of all registered estimators."""
    return sorted(_REGISTRY)


def needs_critic(name: str) -> bool:
    """Whether estimator ``name`` needs value predictions (a critic)."""
    return get_advantage_estimator(name).needs_critic


def critic_free_estimators() -> list[str]:
    """Sorted names of the estimators that need no critic."""
    return [name for name in list_advantage_estimators() if not needs_critic(name)]


# --------------------------------------------------------------------------- policy losses
# What every policy loss is given: the (B, T) tensors, then how to aggregate over tokens.
POLICY_LOSS_DATA_ARGS = ("old_log_prob", "log_prob", "advantages", "response_mask")
POLICY_LOSS_AGG_ARGS = ("loss_agg_mode", "norm_constant", "denominator")

_POLICY_LOSSES: dict[str, PolicyLoss] = {}


@dataclass(frozen=True)
class PolicyLoss:
    """A registered policy loss: the function plus the hyper-parameters it declares."""

    name: str
    fn: Callable[..., tuple[Tensor, dict[str, float]]]
    hyper_params: tuple[str, ...]  # fn's parameters beyond the data and aggregation args

    def __call__(self, **kwargs) -> tuple[Tensor, dict[str, float]]:
        """Run the loss -> ``(loss, metrics)``. A hyper-parameter that another registered
        loss takes is dropped (one config serves every loss); an unknown one raises."""
        known = {p for loss in _POLICY_LOSSES.values() for p in loss.hyper_params}
        given = {}
        for key, value in kwargs.items():
            if key in POLICY_LOSS_DATA_ARGS + POLICY_LOSS_AGG_ARGS or key in self.hyper_params:
                given[key] = value
            elif key not in known:
                raise TypeError(
                    f"unknown hyper-parameter {key!r} for policy loss {self.name!r}; it takes "
                    f"{sorted(self.hyper_params)}, others take {sorted(known)}"
                )
        return self.fn(**given)


def register_policy_loss(name: str) -> Callable[[Callable], Callable]:
    """Decorator registering a policy loss under ``name`` (returns ``fn`` unchanged).

    ``fn`` takes the data args (``POLICY_LOSS_DATA_ARGS``), the aggregation args
    (``POLICY_LOSS_AGG_ARGS``) and its own hyper-parameters, and returns ``(loss,
    metrics)``: a differentiable 0-d tensor and a dict of python floats.
    """

    def decorator(fn: Callable) -> Callable:
        if name in _POLICY_LOSSES and _POLICY_LOSSES[name].fn is not fn:
            raise ValueError(f"policy loss {name!r} is already registered")
        params = inspect.signature(fn).parameters
        missing = [p for p in POLICY_LOSS_DATA_ARGS + POLICY_LOSS_AGG_ARGS if p not in params]
        if missing:
            raise TypeError(f"policy loss {name!r} must take {missing}")
        hyper = tuple(p for p in params if p not in POLICY_LOSS_DATA_ARGS + POLICY_LOSS_AGG_ARGS)
        _POLICY_LOSSES[name] = PolicyLoss(name=name, fn=fn, hyper_params=hyper)
        return fn

    return decorator


def get_policy_loss(name: str) -> PolicyLoss:
    """The policy loss registered as ``name``; ``KeyError`` listing the names otherwise."""
    try:
        return _POLICY_LOSSES[name]
    except KeyError:
        raise KeyError(
            f"unknown policy loss {name!r}; available: {', '.join(sorted(_POLICY_LOSSES))}"
        ) from None


def list_policy_losses() -> list[str]:
    """Sorted names of all registered policy losses."""
    return sorted(_POLICY_LOSSES)
