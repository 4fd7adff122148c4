"""Import path of the published skyrl-gym errors: ``from skyrl_gym.error import RegistrationError``.

The errors live in :mod:`skyrl_gym.errors`; ``Error`` (the published root) is
:class:`~skyrl_gym.errors.SkyRLError`, so ``except skyrl_gym.error.Error`` catches every error
this project raises on purpose."""

from skyrl_gym.errors import RegistrationError
from skyrl_gym.errors import SkyRLError as Error

__all__ = ["Error", "RegistrationError"]
