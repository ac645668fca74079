//! The integration tests, linked into one binary: each test file used to be
//! its own binary carrying all of fusebox and its dependencies (about 145 MB
//! each in a debug build), which filled a CI machine's disk.
//! `tests/http_clients.rs` stays apart because it sets a process environment
//! variable, which is only sound while no other test runs in the process.

mod access;
mod adaptive;
mod alerts;
mod attach;
mod azure;
mod bedrock;
mod blame;
mod breaker_props;
mod cli;
mod clouds;
mod common;
mod console;
mod deadline;
mod deploy;
mod docs;
mod door;
mod drain;
mod faithful;
mod faults;
mod fleet;
mod fleet_failover;
mod fuzz;
mod gateway;
mod hardening;
mod hedge;
mod http_tools;
mod image;
mod keymap;
mod layers;
mod limiter_props;
mod mcp;
mod mcp_conformance;
mod mcp_record;
mod mockserver;
mod otel;
mod record;
mod recovery;
mod replay;
mod request_id;
mod resume;
mod runner;
mod scenarios;

mod sdk;
mod shared;
mod stalled;
mod store_model;
mod streaming;
mod tenancy;
mod theme;
mod traffic_log;
mod vertex;
mod wire_parsers;
