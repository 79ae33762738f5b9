"""The REST API: API Gateway, IAM (SigV4) authorization, proxied to the api Lambda."""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from aws_cdk import Duration
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_wafv2 as wafv2
from constructs import Construct

from jobsched_infra.constructs.functions import JobschedFunction
from jobsched_infra.nag import HIPAA, NIST, acknowledge, acknowledge_in


class Api(Construct):
    """`ANY /api` and `ANY /api/{proxy+}` on stage `stage_name`, each method IAM-authorized.

    Limits: the stage throttles at `rate_limit` requests a second (`burst_limit` at once) and a
    usage plan carries the same throttle and a daily quota for API-key callers; the function has
    `reserved_concurrency`, so neither a flood of calls nor the runs can starve the other; with
    `waf_rate_limit`, a WAF web ACL blocks an IP past that many requests in 5 minutes.
    """

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
        rate_limit: int = 100,
        burst_limit: int = 200,
        daily_quota: int = 1_000_000,
        reserved_concurrency: int | None = None,
        waf_rate_limit: int | None = None,
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
            reserved_concurrency=reserved_concurrency,
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
                throttling_rate_limit=rate_limit,
                throttling_burst_limit=burst_limit,
            ),
            default_method_options=apigw.MethodOptions(authorization_type=apigw.AuthorizationType.IAM),
        )
        # Test invocations from the console skip IAM auth; keep the function's resource policy
        # to the real routes.
        stage = self.rest_api.deployment_stage
        # The execution log group API Gateway writes to, made here so it has a retention (API Gateway
        # would create it on its first write, outside the stack, kept forever). Made before the stage.
        self.execution_logs = logs.LogGroup(
            self,
            "ExecutionLogs",
            log_group_name=f"API-Gateway-Execution-Logs_{self.rest_api.rest_api_id}/{stage_name}",
            retention=log_retention,
        )
        stage.node.add_dependency(self.execution_logs)
        self.usage_plan = self.rest_api.add_usage_plan(
            "UsagePlan",
            description="jobsched: per-client throttle and daily quota (API-key callers)",
            throttle=apigw.ThrottleSettings(rate_limit=rate_limit, burst_limit=burst_limit),
            quota=apigw.QuotaSettings(limit=daily_quota, period=apigw.Period.DAY),
            api_stages=[apigw.UsagePlanPerApiStage(api=self.rest_api, stage=stage)],
        )
        self.web_acl = None if waf_rate_limit is None else self._web_acl(stage, waf_rate_limit)
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
        if self.web_acl is None:
            acknowledge(
                self.rest_api.deployment_stage,
                "APIG3",
                "Every method requires SigV4 (IAM) auth, so unsigned traffic never reaches the function, "
                "and the stage throttles; the WAF rate rule is one flag away (-c waf=true).",
            )
        stage_reason = {
            "APIGWCacheEnabledAndEncrypted": "No cache: every answer is one tenant's live job state; a "
            "cached one would show a run's status as it was.",
            "APIGWSSLEnabled": "The backend is a Lambda proxy integration, not an HTTP endpoint: there is "
            "no backend connection for a client certificate to authenticate.",
        }
        for rule, why in stage_reason.items():
            acknowledge_in(self.rest_api.deployment_stage, rule, why, packs=(HIPAA, NIST))
        if self.web_acl is None:
            acknowledge(
                self.rest_api.deployment_stage,
                "APIGWAssociatedWithWAF",
                "SigV4 auth on every method and the stage throttle stand in front of the function; the WAF "
                "rate rule is one flag away (-c waf=true).",
                pack=NIST,
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

    def _web_acl(self, stage: apigw.Stage, limit: int) -> wafv2.CfnWebACL:
        """A regional web ACL on the stage: one rate-based rule blocking an IP past `limit` per 5 min."""

        def visibility(name: str) -> wafv2.CfnWebACL.VisibilityConfigProperty:
            return wafv2.CfnWebACL.VisibilityConfigProperty(
                cloud_watch_metrics_enabled=True, metric_name=name, sampled_requests_enabled=True
            )

        acl = wafv2.CfnWebACL(
            self,
            "WebAcl",
            scope="REGIONAL",
            default_action=wafv2.CfnWebACL.DefaultActionProperty(allow={}),
            visibility_config=visibility("jobsched-api"),
            rules=[
                wafv2.CfnWebACL.RuleProperty(
                    name="RatePerIp",
                    priority=0,
                    action=wafv2.CfnWebACL.RuleActionProperty(block={}),
                    statement=wafv2.CfnWebACL.StatementProperty(
                        rate_based_statement=wafv2.CfnWebACL.RateBasedStatementProperty(
                            limit=limit, aggregate_key_type="IP", evaluation_window_sec=300
                        )
                    ),
                    visibility_config=visibility("jobsched-api-rate"),
                )
            ],
        )
        wafv2.CfnWebACLAssociation(
            self, "WebAclAssociation", resource_arn=stage.stage_arn, web_acl_arn=acl.attr_arn
        )
        acknowledge_in(
            acl,
            "WAFv2LoggingEnabled",
            "The ACL's CloudWatch metrics and sampled requests are on (both rules); full request logs "
            "would duplicate the API's own access log.",
            packs=(HIPAA, NIST),
        )
        return acl
