"""The Lambda conventions every jobsched function shares: runtime, architecture, layer, tracing, logs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from aws_cdk import Duration
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from jobsched_infra.nag import HIPAA, NIST, SERVERLESS, acknowledge, acknowledge_in
from jobsched_infra.project import FUNCTIONS_DIR

# The layer's wheels are built for exactly this pair (jobsched_infra.layer), so both live here.
RUNTIME = lambda_.Runtime.PYTHON_3_12
ARCHITECTURE = lambda_.Architecture.ARM_64
# Every function's entry point, as Lambda's `Handler` setting spells it (module.function): AWS's word
# and the Python convention fix the names handler.py and lambda_handler; in jobsched's own words it
# is an entry point, and a handler is a job's callable (docs/design.md, Names).
ENTRY_POINT = "handler.lambda_handler"
ASSET_EXCLUDES = ["__pycache__", "*.pyc"]


class CoreLayer(lambda_.LayerVersion):
    """The `jobsched` core library (and its dependencies) as a layer, from a `build_layer` directory."""

    def __init__(self, scope: Construct, construct_id: str, *, asset_dir: Path) -> None:
        if not (Path(asset_dir) / "python" / "jobsched").is_dir():
            raise ValueError(f"{asset_dir} holds no python/jobsched: build it first (infra/build_layer.py)")
        super().__init__(
            scope,
            construct_id,
            code=lambda_.Code.from_asset(str(asset_dir), exclude=ASSET_EXCLUDES),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            description="jobsched core library",
        )


class JobschedFunction(Construct):
    """The function of entry point `functions/<name>/handler.py`: on the shared layer, traced, own log group.

    Its id in a construct that makes one is "Handler", an older name kept because it is part of
    every logical id under it: a new id would replace the function on the next deploy.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        name: str,
        layer: lambda_.ILayerVersion,
        environment: Mapping[str, str],
        timeout: Duration,
        memory_size: int = 256,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
        retry_attempts: int | None = None,
        reserved_concurrency: int | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        code_dir = FUNCTIONS_DIR / name
        if not (code_dir / "handler.py").is_file():
            raise ValueError(f"no entry point (handler.py) in {code_dir}")
        # An explicit log group (not the deprecated log_retention custom resource) keeps the
        # retention in the template and the stack free of a helper Lambda.
        self.log_group = logs.LogGroup(self, "Logs", retention=log_retention)
        self.function = lambda_.Function(
            self,
            "Function",
            description=f"jobsched {name}",
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=ENTRY_POINT,
            code=lambda_.Code.from_asset(str(code_dir), exclude=ASSET_EXCLUDES),
            layers=[layer],
            environment=dict(environment),
            timeout=timeout,
            memory_size=memory_size,
            tracing=lambda_.Tracing.ACTIVE,
            log_group=self.log_group,
            retry_attempts=retry_attempts,
            reserved_concurrent_executions=reserved_concurrency,
        )
        role = self.function.role
        assert role is not None  # the function made its own role
        acknowledge(
            role,
            "IAM4",
            "AWSLambdaBasicExecutionRole is Lambda's standard logging grant: CloudWatch Logs writes only.",
            finding="Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        )
        acknowledge(
            role,
            "IAM5",
            "Active tracing needs xray:PutTraceSegments and xray:PutTelemetryRecords, which take no "
            "resource-level permissions.",
            finding="Resource::*",
        )
        acknowledge(
            self.function,
            "L1",
            "Python 3.12 on purpose: the layer's binary wheels (pydantic-core) are built for cp312 arm64.",
        )
        acknowledge(
            self.function,
            "LambdaLatestVersion",
            "Python 3.12 on purpose: the layer's binary wheels (pydantic-core) are built for cp312 arm64.",
            pack=SERVERLESS,
        )
        acknowledge_in(
            self.function,
            "LambdaDLQ",
            "No event is lost with the function: the api answers synchronously, the dispatcher's next "
            "tick redoes a failed pass (shard watermarks), and the queue functions' records stay in "
            "their queue, the execution queue redriving to its own DLQ.",
            packs=(HIPAA, NIST, SERVERLESS),
        )
        acknowledge_in(
            self.function,
            "LambdaInsideVPC",
            "The functions call only AWS APIs (DynamoDB, SQS, Step Functions, SNS) over TLS with IAM; "
            "no VPC resource is reached, and a VPC would add NAT or endpoints without a control gained.",
            packs=(HIPAA, NIST),
        )
        acknowledge_in(
            role,
            "IAMNoInlinePolicy",
            "CDK's DefaultPolicy: the role's own least-privilege statements, made and deleted with it; "
            "a managed policy would be shareable, and nothing shares them.",
            packs=(HIPAA, NIST),
        )
