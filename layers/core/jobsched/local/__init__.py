"""The local stack: an embedded AWS (moto's server) plus the loops that play EventBridge, the SQS
event-source mapping and API Gateway, invoking the very Lambda entry points CDK deploys, in-process."""
