"""The REST API: API Gateway, IAM (SigV4) authorization, proxied to the api Lambda."""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from aws_cdk import Duration
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from jobsched_infra.constructs.functions import JobschedFunction
from jobsched_infra.nag import acknowledge


class Api(Construct):
    """`ANY /api` and `ANY /api/{proxy+}` on stage `stage_name`, each method IAM-authorized."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        layer: lambda_.ILayerVersion,
        environment: Mapping[str, str],
        timeout: Duration,
        stage_name: str = "v1",
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
    ) -> None:
        super().__init__(scope, construct_id)
        self.entry_point = JobschedFunction(
            self,
            "Handler",
            name="api",
            layer=layer,
            environment=environment,
            timeout=timeout,
            log_retention=log_retention,
        )
        self.access_logs = logs.LogGroup(self, "AccessLogs", retention=log_retention)
        self.rest_api = apigw.RestApi(
            self,
            "RestApi",
            description="jobsched REST API (SigV4-signed calls; the IAM principal is the tenant)",
            endpoint_types=[apigw.EndpointType.REGIONAL],
            # Access and execution logging need the account-level CloudWatch role to be set.
            cloud_watch_role=True,
            deploy_options=apigw.StageOptions(
                stage_name=stage_name,
                access_log_destination=apigw.LogGroupLogDestination(self.access_logs),
                access_log_format=apigw.AccessLogFormat.json_with_standard_fields(
                    caller=True,
                    http_method=True,
                    ip=True,
                    protocol=True,
                    request_time=True,
                    resource_path=True,
                    response_length=True,
                    status=True,
                    user=True,
                ),
                logging_level=apigw.MethodLoggingLevel.ERROR,
                tracing_enabled=True,
            ),
            default_method_options=apigw.MethodOptions(authorization_type=apigw.AuthorizationType.IAM),
        )
        # Test invocations from the console skip IAM auth; keep the function's resource policy
        # to the real routes.
        integration = apigw.LambdaIntegration(self.entry_point.function, proxy=True, allow_test_invoke=False)
        api = self.rest_api.root.add_resource("api")
        self.methods = [
            api.add_method("ANY", integration),
            api.add_resource("{proxy+}").add_method("ANY", integration),
        ]

        acknowledge(
            cast(apigw.CfnRestApi, self.rest_api.node.default_child),
            "APIG2",
            "Proxy integration: the api function validates every body (pydantic) and answers 4xx with "
            "the error envelope; API Gateway models would duplicate that contract.",
        )
        acknowledge(
            self.rest_api.deployment_stage,
            "APIG3",
            "Every method requires SigV4 (IAM) auth, so unsigned traffic never reaches the function; "
            "a WAF web ACL can be attached per account if wanted.",
        )
        for method in self.methods:
            acknowledge(method, "COG4", "The API uses IAM authorization (SigV4), not Cognito user pools.")
        cloud_watch_role = self.rest_api.node.find_child("CloudWatchRole")
        acknowledge(
            cloud_watch_role,
            "IAM4",
            "AmazonAPIGatewayPushToCloudWatchLogs is the policy API Gateway documents for its "
            "account-level logging role; it only writes CloudWatch logs.",
            finding="Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs",
        )
