"""The composition root: builds the concrete adapters and the services from Settings, once per process.

`build` wires AWS (boto3 clients); `compose` wires any implementation of the ports.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import boto3
from botocore.config import Config

from jobsched import constants as c
from jobsched import ports
from jobsched.adapters.alerts import DynamoDBAlertStore, NoAlertStore, NoAlertTopic, SnsAlertPublisher
from jobsched.adapters.dynamodb import JobStore, RunStore
from jobsched.adapters.dynamodb.fargate_vcpu import DynamoDBFargateVcpuStore
from jobsched.adapters.dynamodb.limits import DynamoDBLimitStore, DynamoDBQuotaStore
from jobsched.adapters.dynamodb.packs import PackStore
from jobsched.adapters.fargate_vcpu import MemoryFargateVcpuStore
from jobsched.adapters.limits import MemoryLimitStore
from jobsched.adapters.secrets import KmsSigningSecrets
from jobsched.adapters.sqs import RunQueue
from jobsched.adapters.stepfunctions import StateMachines
from jobsched.adapters.targets import AddressPolicy, AssumedRoles, EcsPlace, TargetFactory
from jobsched.adapters.targets.http import SigningSecret
from jobsched.domain.targets import TargetFailed
from jobsched.handlers import DEMO_HANDLERS, HandlerRegistry, registry
from jobsched.ports import Clock, CrashPoints, SystemClock, no_crash
from jobsched.services.alerts import AlertService
from jobsched.services.dag import DagService
from jobsched.services.dispatch import Dispatcher
from jobsched.services.failures import FailureService
from jobsched.services.jobs import JobService
from jobsched.services.limits import TenantQuotas
from jobsched.services.packs import MaterializingJobStore, PackedJobs
from jobsched.services.run import Worker
from jobsched.services.schedule import ScheduleService
from jobsched.settings import Settings

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kms import KMSClient
    from mypy_boto3_sns import SNSClient
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient
    from mypy_boto3_sts import STSClient

# Standard retry mode retries throttles and 5xx with backoff; the adapters turn what still
# fails into TransientStoreError.
# max_pool_connections: the dispatcher keeps up to io_workers calls in flight per shard it drains.
_BOTO_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 5},
    connect_timeout=3,
    read_timeout=10,
    max_pool_connections=64,
)


def no_signing_secret(tenant: str) -> str:
    """The signing secret where no store is configured: every http attempt fails (fail closed)."""
    raise TargetFailed(
        f"no signing-secret store ({c.SIGNING_SECRETS_TABLE_ENV}) to sign tenant {tenant}'s request",
        error_type="SigningSecretMissing",
    )


def signing_secret_of(store: ports.SigningSecrets | None) -> SigningSecret:
    """The store's `current` (tenant -> secret, created on first use), or no_signing_secret."""
    return store.current if store is not None else no_signing_secret


def address_policy(settings: Settings) -> AddressPolicy:
    """The deployment's http address policy: AddressPolicy.local() only where the settings say local."""
    return AddressPolicy.local() if settings.target_policy == "local" else AddressPolicy.aws()


def target_factory(
    settings: Settings,
    handlers: HandlerRegistry,
    *,
    sts: STSClient | None = None,
    clock: Clock | None = None,
    signing_secret: SigningSecret | None = None,
    lazy_sts: bool = False,
) -> TargetFactory:
    """Every target kind: AWS targets act through AssumedRoles over `sts` (None: python and http only,
    unless `lazy_sts`: the environment's STS client, made at the first AssumeRole)."""
    clock = clock or SystemClock()
    roles = None
    if sts is not None:
        roles = AssumedRoles(sts, region=sts.meta.region_name, clock=clock)
    elif lazy_sts:
        session = boto3.session.Session()
        roles = AssumedRoles(
            lambda: session.client("sts", config=_BOTO_CONFIG),
            region=session.region_name or "us-east-1",  # Lambda always sets AWS_REGION
            clock=clock,
        )
    ecs_place = None
    if settings.ecs_cluster:
        ecs_place = EcsPlace(
            cluster=settings.ecs_cluster,
            subnets=settings.ecs_subnets,
            security_groups=settings.ecs_security_groups,
            execution_role_arn=settings.ecs_execution_role_arn,
            log_group=settings.ecs_log_group,
            worker_family=settings.ecs_worker_family,
        )
    return TargetFactory(
        handlers=handlers,
        roles=roles,
        signing_secret=signing_secret or no_signing_secret,
        policy=address_policy(settings),
        clock=clock,
        # The stack's own ECS client (container targets run in its cluster), made at first use.
        ecs=(lambda: boto3.client("ecs", config=_BOTO_CONFIG)) if ecs_place else None,
        ecs_place=ecs_place,
        local_containers=settings.container_runner == "local",
    )


def run_queue(sqs: SQSClient, settings: Settings) -> RunQueue:
    """The queue this process receives from (the ECS worker's own, or the execution queue), sending
    each run to its lane's worker queue (jobsched.domain.compute)."""
    lanes = {"lambda": settings.execution_queue_url}
    if settings.ecs_queue_url:
        lanes["ecs"] = settings.ecs_queue_url
    home = lanes["ecs"] if settings.worker_lane == "ecs" and settings.ecs_queue_url else lanes["lambda"]
    return RunQueue(client=sqs, queue_url=home, lanes=lanes)


def clients(**kwargs: Any) -> tuple[DynamoDBClient, SQSClient, SFNClient]:
    """boto3 clients for DynamoDB, SQS and Step Functions (endpoint and credentials from the environment)."""
    session = boto3.session.Session()
    return (
        session.client("dynamodb", config=_BOTO_CONFIG, **kwargs),
        session.client("sqs", config=_BOTO_CONFIG, **kwargs),
        session.client("stepfunctions", config=_BOTO_CONFIG, **kwargs),
    )


@dataclass
class Services:
    """Everything a function needs, built once."""

    settings: Settings
    jobs: ports.JobStore
    runs: ports.RunStore
    queue: ports.RunQueue
    dispatcher: Dispatcher
    worker: Worker
    job_service: JobService
    registry: HandlerRegistry
    clock: Clock
    failures: FailureService
    schedule: ScheduleService
    dag: DagService
    signing_secrets: ports.SigningSecrets | None = None
    alerts: AlertService | None = None
    limits: ports.LimitStore | None = None
    quotas: ports.QuotaStore | None = None
    # Packed one-offs (services/packs.py); None: a batch's one-offs are each their own item.
    packed: PackedJobs | None = None

    @property
    def signing_secret(self) -> Callable[[str], str]:
        """tenant -> the secret its HTTP target requests are signed with (cached: no KMS call per run)."""
        return signing_secret_of(self.signing_secrets)


def build(
    settings: Settings,
    *,
    dynamodb: DynamoDBClient | None = None,
    sqs: SQSClient | None = None,
    stepfunctions: SFNClient | None = None,
    clock: Clock | None = None,
    crash: CrashPoints = no_crash,
    handlers: HandlerRegistry | None = None,
    kms: KMSClient | None = None,
    sts: STSClient | None = None,
    sns: SNSClient | None = None,
    metrics: ports.Metrics | None = None,
) -> Services:
    """Wire the services to AWS; explicit clients and clock win over the defaults."""
    if dynamodb is None or sqs is None or stepfunctions is None:
        default_ddb, default_sqs, default_sfn = clients()
        dynamodb, sqs = dynamodb or default_ddb, sqs or default_sqs
        stepfunctions = stepfunctions or default_sfn
    signing_secrets = None
    if settings.signing_secrets_table:
        signing_secrets = KmsSigningSecrets(
            client=dynamodb,
            kms=kms or boto3.session.Session().client("kms", config=_BOTO_CONFIG),
            table=settings.signing_secrets_table,
            key_id=settings.signing_key_arn,
            clock=clock or SystemClock(),
        )
    handlers = handlers or registry
    # Alerts are kept in the alerts table and published to the topic the settings name (a deployment
    # names both); without a table none is raised (services/alerts.py raises what the store kept).
    alert_store: ports.AlertStore = (
        DynamoDBAlertStore(client=dynamodb, table=settings.alerts_table)
        if settings.alerts_table
        else NoAlertStore()
    )
    alert_publisher: ports.AlertPublisher = NoAlertTopic()
    if settings.alert_topic_arn:
        # Beside an emulated DynamoDB (an explicit endpoint), the same endpoint: never AWS's own.
        endpoint = dynamodb.meta.endpoint_url
        sns = sns or boto3.session.Session().client(
            "sns", config=_BOTO_CONFIG, endpoint_url=None if endpoint.endswith(".amazonaws.com") else endpoint
        )
        alert_publisher = SnsAlertPublisher(client=sns, topic_arn=settings.alert_topic_arn)
    return compose(
        settings,
        jobs=JobStore(client=dynamodb, table=settings.jobs_table, shard_count=settings.shard_count),
        runs=RunStore(client=dynamodb, table=settings.runs_table),
        queue=run_queue(sqs, settings),
        state_machines=StateMachines(
            client=stepfunctions, failure_workflow_arn=settings.failure_workflow_arn
        ),
        clock=clock,
        crash=crash,
        handlers=handlers,
        signing_secrets=signing_secrets,
        metrics=metrics,
        targets=target_factory(
            settings,
            handlers,
            sts=sts,
            clock=clock,
            signing_secret=signing_secret_of(signing_secrets),
            # The worker's own STS client assumes each tenant's role for the AWS targets.
            lazy_sts=True,
        ),
        alert_store=alert_store,
        alert_publisher=alert_publisher,
        limits=DynamoDBLimitStore(client=dynamodb, table=settings.limits_table)
        if settings.limits_table
        else None,
        quotas=DynamoDBQuotaStore(client=dynamodb, table=settings.quotas_table)
        if settings.quotas_table
        else None,
        fargate_vcpu=DynamoDBFargateVcpuStore(client=dynamodb, table=settings.fargate_vcpu_table)
        if settings.fargate_vcpu_table
        else None,
        packs=PackStore(
            client=dynamodb,
            table=settings.jobs_table,
            runs_table=settings.runs_table,
            shard_count=settings.shard_count,
        ),
    )


def compose(
    settings: Settings,
    *,
    jobs: ports.JobStore,
    runs: ports.RunStore,
    queue: ports.RunQueue,
    state_machines: ports.StateMachines,
    clock: Clock | None = None,
    crash: CrashPoints = no_crash,
    handlers: HandlerRegistry | None = None,
    signing_secrets: ports.SigningSecrets | None = None,
    targets: TargetFactory | None = None,
    alert_store: ports.AlertStore | None = None,
    alert_publisher: ports.AlertPublisher | None = None,
    metrics: ports.Metrics | None = None,
    limits: ports.LimitStore | None = None,
    quotas: ports.QuotaStore | None = None,
    fargate_vcpu: ports.FargateVcpuStore | None = None,
    packs: ports.PackStore | None = None,
) -> Services:
    """Wire the services to any implementation of the ports (AWS, or jobsched.adapters.memory).

    `limits` None: concurrency keys held in this process only (tests); `quotas` None: the defaults;
    `fargate_vcpu` None: Fargate vCPU reservations counted in this process only (tests).
    `packs` None: no one-off is packed (jobsched.domain.packs); a batch's jobs are each an item.

    `targets` None: python and http targets (no STS client, so an AWS target's attempt fails).
    `alert_store`, `alert_publisher` None: no alerts (jobsched.adapters.memory has fakes for tests).
    """
    clock = clock or SystemClock()
    handlers = handlers or registry
    targets = targets or target_factory(
        settings, handlers, clock=clock, signing_secret=signing_secret_of(signing_secrets)
    )
    handlers.load_modules(settings.handler_modules)
    if not settings.demo_handlers:  # fail-closed: a deployed stack knows no demo.* unless asked
        handlers = handlers.without(DEMO_HANDLERS)
    metrics = metrics or ports.NoMetrics()
    limits = limits or MemoryLimitStore()
    # Packed jobs are copied out to an item of their own on their first read by id (services/packs.py):
    # every service reads jobs through that store but the worker's and the dispatcher's hot paths,
    # which read a job's start markers and due entries, and route a packed run by its message.
    packed = PackedJobs(jobs=jobs, runs=runs, packs=packs, clock=clock) if packs is not None else None
    plain = jobs
    if packed is not None:
        jobs = cast(ports.JobStore, MaterializingJobStore(jobs, packed))
    alerts = AlertService(
        store=alert_store or NoAlertStore(),
        publisher=alert_publisher or NoAlertTopic(),
        jobs=jobs,
        clock=clock,
        metrics=metrics,
    )
    # One cache of the tenants' quotas per process: the api's checks, the dispatcher's rate, the
    # worker's concurrent runs.
    tenant_quotas = TenantQuotas(store=quotas, limits=limits, clock=clock)
    dispatcher = Dispatcher(
        jobs=plain,
        runs=runs,
        queue=queue,
        settings=settings,
        clock=clock,
        crash=crash,
        alerts=alerts,
        metrics=metrics,
        quotas=tenant_quotas,
        packs=packs,
    )
    dag = DagService(
        jobs=jobs, runs=runs, state_machines=state_machines, settings=settings, clock=clock, packed=packed
    )
    failures = FailureService(
        jobs=jobs,
        runs=runs,
        state_machines=state_machines,
        settings=settings,
        clock=clock,
        dag=dag,
        alerts=alerts,
        metrics=metrics,
        packed=packed,
    )
    worker = Worker(
        jobs=plain,
        runs=runs,
        queue=queue,
        registry=handlers,
        settings=settings,
        clock=clock,
        failures=failures,
        dag=dag,
        crash=crash,
        targets=targets,
        alerts=alerts,
        metrics=metrics,
        limits=limits,
        quotas=tenant_quotas,
        fargate_vcpu=fargate_vcpu or MemoryFargateVcpuStore(),
    )
    service = JobService(
        jobs=jobs,
        runs=runs,
        dispatcher=dispatcher,
        registry=handlers,
        clock=clock,
        dag=dag,
        targets=targets,
        signing_secrets=signing_secrets,
        quotas=tenant_quotas,
        packed=packed,
    )
    schedule = ScheduleService(jobs=jobs, runs=runs, queue=queue, job_service=service, clock=clock)
    return Services(
        settings,
        plain,
        runs,
        queue,
        dispatcher,
        worker,
        service,
        handlers,
        clock,
        failures,
        schedule,
        dag,
        signing_secrets,
        alerts,
        limits,
        quotas,
        packed,
    )
