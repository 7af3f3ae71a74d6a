//! `prefix-router epp` against a gateway that misbehaves or is not one:
//! streams held open after their pick (the response deadline releases
//! their in-flight counts in Valkey), a message over the gRPC size limit,
//! a body after the end of the request, and a client without a valid
//! certificate on a TLS port. A real valkey-server, real gRPC, the real
//! tokenizer.

use crate::envoy;

use crate::epp_fleet as fleet;

use std::time::{Duration, Instant};

use envoy::{
    Envoy, destination, exchange_duplex, immediate, request_body, request_headers, response_headers,
};
use fleet::{Fleet, MODEL, completion, fleet_tuned, health_over, pick_duplex, wait_in_flight};
use futures_util::StreamExt;
use prefix_router::ext_proc::processing_response::Response;
use prefix_router::{BodyMode, GrpcTls};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair,
};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use tonic_health::pb::health_check_response::ServingStatus;

/// Streams opened and held after their pick (the probe of issue 30 held
/// 1,500 over three workers).
const HELD: usize = 1500;
/// Streams per gRPC connection, as a gateway multiplexes them (under the
/// server's default of 200 concurrent streams per connection).
const PER_CONNECTION: usize = 100;

/// The in-flight counts of every worker in Valkey, summed.
async fn total_in_flight(f: &Fleet) -> u64 {
    f.store
        .workers(MODEL)
        .await
        .unwrap()
        .iter()
        .map(|w| w.info.in_flight)
        .sum()
}

async fn channel(grpc: std::net::SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{grpc}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// Streams picked and then held open (no response, no end) release their
/// in-flight counts at `--epp-response-timeout`, and end with
/// DEADLINE_EXCEEDED; without the deadline their counts stayed as long as
/// the gateway kept them open.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn held_streams_release_their_counts_at_the_response_deadline() {
    let timeout = Duration::from_secs(5);
    let f = fleet_tuned(
        1,
        BodyMode::FullDuplexStreamed,
        |_| {},
        |epp| {
            epp.response_timeout = timeout;
            epp.max_streams = Some(HELD + 10);
        },
    )
    .await;
    let grpc = f.pickers[0].1;
    let mut channels = Vec::new();
    for _ in 0..HELD.div_ceil(PER_CONNECTION) {
        channels.push(channel(grpc).await);
    }
    let started = Instant::now();
    let held: Vec<Envoy> = futures_util::stream::iter(0..HELD)
        .map(|i| {
            let channel = channels[i / PER_CONNECTION].clone();
            async move {
                let mut envoy = Envoy::over(channel).await;
                let body = completion(&format!("held stream {i}"));
                pick_duplex(&mut envoy, &body, true, None).await;
                envoy
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let picked_in = started.elapsed();
    let counted = total_in_flight(&f).await;
    eprintln!("{HELD} streams picked in {picked_in:?}; {counted} counted in Valkey");
    assert!(counted > 0, "the held streams are counted while they last");
    // Every stream is still open: only the deadline can release them.
    let mut last = counted;
    for _ in 0..600 {
        last = total_in_flight(&f).await;
        if last == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(last, 0, "in flight after the deadline, streams held open");
    wait_in_flight(&f, &[("w0", 0), ("w1", 0), ("w2", 0)]).await;
    let mut ended = 0;
    for mut envoy in held {
        let status = tokio::time::timeout(Duration::from_secs(20), envoy.rx.message())
            .await
            .expect("the stream ends")
            .expect_err("an error status, not the end of the stream");
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
        ended += 1;
    }
    assert_eq!(ended, HELD);
    // The picker still picks.
    let mut envoy = Envoy::over(channels[0].clone()).await;
    let chosen = pick_duplex(&mut envoy, &completion("after the deadline"), true, None).await;
    assert!(f.endpoints.contains(&chosen[0]));
    envoy.close().await;
}

/// A message over the gRPC size limit (the body cap, 16 MiB, plus 1 MiB)
/// ends the stream with an error status; one under it but over the body
/// cap is answered 413.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_oversized_message_ends_the_stream_with_an_error_status() {
    let f = fleet_tuned(1, BodyMode::FullDuplexStreamed, |_| {}, |_| {}).await;
    let grpc = f.pickers[0].1;
    let mut envoy = Envoy::open(grpc).await;
    envoy
        .send(request_headers("/v1/completions", false, None, None))
        .await;
    envoy
        .send(request_body(&vec![b' '; (17 << 20) + 1024], true))
        .await;
    let ended = tokio::time::timeout(Duration::from_secs(20), envoy.rx.message())
        .await
        .expect("the stream ends");
    let status = ended.expect_err("an error status, not OK with no answer");
    assert_ne!(status.code(), tonic::Code::Ok);
    eprintln!("oversized message: {status:?}");
    // 17 MB: within the message limit, over the body cap.
    let mut envoy = Envoy::open(grpc).await;
    envoy
        .send(request_headers("/v1/completions", false, None, None))
        .await;
    envoy
        .send(request_body(&vec![b' '; 17_000_000], true))
        .await;
    let (status, error) = immediate(&envoy.recv().await);
    assert_eq!(status, 413, "{error}");
}

/// A body after the request's end does not change the destination already
/// sent, nor turn into a 400 after it: it is ignored and the exchange goes
/// on (the response is relayed, the count released at its end).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_body_after_the_end_of_the_request_is_ignored() {
    let f = fleet_tuned(1, BodyMode::FullDuplexStreamed, |_| {}, |_| {}).await;
    let mut envoy = Envoy::open(f.pickers[0].1).await;
    let answer = exchange_duplex(&mut envoy, &completion("one body only"), true, None).await;
    let chosen = destination(&answer);
    envoy.send(request_body(b"{\"second\": true}", true)).await;
    envoy.send(response_headers("200", Some(&chosen[0]))).await;
    let next = envoy.recv().await;
    assert!(
        matches!(next.response, Some(Response::ResponseHeaders(_))),
        "the response goes on, no error after the destination: {next:?}"
    );
    envoy.close().await;
    wait_in_flight(&f, &[("w0", 0), ("w1", 0), ("w2", 0)]).await;
}

/// PEM files of a CA, the picker's certificate, a gateway's client
/// certificate of that CA, and one of another CA.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let ca = |name: &str| {
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
            std::fs::write(dir.path().join(format!("{name}.pem")), ca.pem()).unwrap();
            ca
        };
        let leaf = |name: &str, sans: &[&str], usage, issuer: &CertifiedIssuer<'_, KeyPair>| {
            let key = KeyPair::generate().unwrap();
            let mut params =
                CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
                    .unwrap();
            params.extended_key_usages = vec![usage];
            let cert = params.signed_by(&key, issuer).unwrap();
            std::fs::write(dir.path().join(format!("{name}.pem")), cert.pem()).unwrap();
            std::fs::write(dir.path().join(format!("{name}.key")), key.serialize_pem()).unwrap();
        };
        let trusted = ca("ca");
        let stranger = ca("other-ca");
        let server = ExtendedKeyUsagePurpose::ServerAuth;
        let client = ExtendedKeyUsagePurpose::ClientAuth;
        leaf("picker", &["127.0.0.1", "localhost"], server, &trusted);
        leaf("gateway", &["gateway"], client.clone(), &trusted);
        leaf("stranger", &["gateway"], client, &stranger);
        Pki { dir }
    }

    fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }

    fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).unwrap()
    }

    /// A TLS channel trusting the picker's CA, presenting `client`'s
    /// certificate when given; `None` when it cannot connect.
    async fn channel(&self, grpc: std::net::SocketAddr, client: Option<&str>) -> Option<Channel> {
        let mut tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(self.read("ca.pem")))
            .domain_name("localhost");
        if let Some(name) = client {
            tls = tls.identity(Identity::from_pem(
                self.read(&format!("{name}.pem")),
                self.read(&format!("{name}.key")),
            ));
        }
        Channel::from_shared(format!("https://{grpc}"))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect()
            .await
            .ok()
    }
}

fn tls_of(pki: &Pki) -> GrpcTls {
    GrpcTls {
        cert: pki.path("picker.pem"),
        key: pki.path("picker.key"),
        client_ca: pki.path("ca.pem"),
    }
}

/// With --grpc-tls-*, the gRPC port serves only gateways presenting a
/// certificate of the client CA: plaintext, no certificate, and another
/// CA's certificate are refused; the gateway's certificate is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_grpc_port_with_tls_serves_only_valid_client_certificates() {
    let pki = Pki::new();
    let tls = tls_of(&pki);
    let f = fleet_tuned(
        1,
        BodyMode::FullDuplexStreamed,
        |_| {},
        move |epp| epp.tls = Some(tls.clone()),
    )
    .await;
    let grpc = f.pickers[0].1;
    // The gateway's certificate: served (ready once Valkey is seen; the
    // patience is for 2 cores shared with the other tests of this file).
    let mut ready = None;
    for _ in 0..600 {
        if let Some(channel) = pki.channel(grpc, Some("gateway")).await {
            ready = health_over(channel, "readiness").await;
            if ready == Some(ServingStatus::Serving) {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(ready, Some(ServingStatus::Serving));
    let channel = pki.channel(grpc, Some("gateway")).await.unwrap();
    let mut envoy = Envoy::over(channel).await;
    let chosen = pick_duplex(&mut envoy, &completion("over TLS"), true, None).await;
    assert!(f.endpoints.contains(&chosen[0]));
    envoy.close().await;
    // Refused: plaintext, TLS without a certificate, another CA's.
    assert_eq!(fleet::health(grpc, "readiness").await, None, "plaintext");
    for client in [None, Some("stranger")] {
        let served = match pki.channel(grpc, client).await {
            Some(channel) => health_over(channel, "readiness").await,
            None => None,
        };
        assert_eq!(served, None, "client certificate {client:?} was served");
    }
}
