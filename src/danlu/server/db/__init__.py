"""The control plane's store: engine/sessions, typed models and migrations."""

from danlu.server.db.engine import Database, make_engine
from danlu.server.db.migrate import current_revision, head_revision, upgrade_database
from danlu.server.db.models import (
    ApiToken,
    Base,
    Counter,
    Gpu,
    Job,
    JobEnergy,
    JobEvent,
    JobMetric,
    JobRun,
    Lease,
    Node,
    Project,
    ProjectMember,
    Sweep,
    User,
    Webhook,
    WebhookDelivery,
)

__all__ = [
    "ApiToken",
    "Base",
    "Counter",
    "Database",
    "Gpu",
    "Job",
    "JobEnergy",
    "JobEvent",
    "JobMetric",
    "JobRun",
    "Lease",
    "Node",
    "Project",
    "ProjectMember",
    "Sweep",
    "User",
    "Webhook",
    "WebhookDelivery",
    "current_revision",
    "head_revision",
    "make_engine",
    "upgrade_database",
]
