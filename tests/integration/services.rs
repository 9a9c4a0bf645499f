//! The standard services beside Matching: gRPC health and reflection.

use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

use crate::support::TestServer;

#[tokio::test]
async fn health_reports_the_matching_service_serving() {
    let server = TestServer::start().await;
    let mut health = HealthClient::new(server.channel());
    let status = health
        .check(HealthCheckRequest { service: "fairway.v1.Matching".into() })
        .await
        .expect("health check")
        .into_inner()
        .status;
    assert_eq!(status, ServingStatus::Serving as i32);
    server.stop().await;
}

#[tokio::test]
async fn reflection_lists_the_services() {
    let server = TestServer::start().await;
    let mut reflection = ServerReflectionClient::new(server.channel());
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses =
        reflection.server_reflection_info(futures::stream::iter([request])).await.expect("reflection").into_inner();
    let response = responses.message().await.expect("a response").expect("one message");
    let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
        panic!("unexpected reflection answer: {response:?}");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(names.contains(&"fairway.v1.Matching".to_owned()), "{names:?}");
    assert!(names.contains(&"grpc.health.v1.Health".to_owned()), "{names:?}");
    server.stop().await;
}
