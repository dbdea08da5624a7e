"""The config layer: the schema (schema.py), composition from Hydra overrides and its guards
(compose.py, guards.py), the checks (check*.py), derived values (derive.py), identity
(identity.py) and the resolved run spec (spec.py).  Data, encodings, tasks and the model
never import it; the run, the reports and the command line do."""

from posexp.config.check import check, check_attention, check_device, check_device_name
from posexp.config.check_eval import check_eval
from posexp.config.compose import (
    CONFIG_DIR,
    apply_overrides,
    compose,
    compose_overrides,
    split_hydra,
)
from posexp.config.derive import resolve
from posexp.config.identity import (
    OPTIONAL_KEYS,
    SEED_KEYS,
    identity,
    identity_diff,
    in_identity,
)
from posexp.config.keys import flatten, schema_keys, unknown_key
from posexp.config.schema import (
    GROUPS,
    Attention,
    Config,
    EvalMode,
    EvalScalingConfig,
    register,
)
from posexp.config.spec import RunSpec

__all__ = ["CONFIG_DIR", "GROUPS", "OPTIONAL_KEYS", "SEED_KEYS", "Attention", "Config",
           "EvalMode", "EvalScalingConfig", "RunSpec", "apply_overrides", "check",
           "check_attention", "check_device", "check_device_name", "check_eval", "compose",
           "compose_overrides", "flatten", "identity", "identity_diff", "in_identity",
           "register", "resolve", "schema_keys", "split_hydra", "unknown_key"]
