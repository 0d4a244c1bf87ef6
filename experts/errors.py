"""The model layer's part of the error tree (defined in `frontdesk.errors`)."""

from frontdesk.errors import (
    EmptySummary,
    MissingAPIKey,
    ModelAPIError,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelRequestsBlocked,
    OutputValidationError,
    ProviderOverloaded,
    ProviderQuotaExhausted,
    RateLimited,
    Refusal,
    TruncatedOutput,
    UnconsumedSteps,
    UnexpectedModelCall,
    UnknownModelSpec,
)

__all__ = [
    "EmptySummary",
    "MissingAPIKey",
    "ModelAPIError",
    "ModelConnectionError",
    "ModelError",
    "ModelHTTPError",
    "ModelRequestsBlocked",
    "OutputValidationError",
    "ProviderOverloaded",
    "ProviderQuotaExhausted",
    "RateLimited",
    "Refusal",
    "TruncatedOutput",
    "UnconsumedSteps",
    "UnexpectedModelCall",
    "UnknownModelSpec",
]
