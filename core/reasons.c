#include "reasons.h"

static const struct session_end_info reasons[SESSION_END_REASON_COUNT] = {
	[SESSION_END_NONE] = {"none", NULL, NULL, NULL, BASE_LOG_DEBUG},
	[SESSION_END_CLIENT_CLOSED] = {"client_closed", NULL, NULL, NULL, BASE_LOG_DEBUG},
	[SESSION_END_CLIENT_TERMINATE] = {"client_terminate", NULL, NULL, NULL, BASE_LOG_DEBUG},
	[SESSION_END_CLIENT_IO_ERROR] = {"client_io_error", NULL, NULL, NULL, BASE_LOG_INFO},
	[SESSION_END_TOO_MANY_CLIENTS] = {"too_many_clients", "53300",
					  "sorry, too many clients already (max_client_conn)",
					  "Raise [limits] max_client_conn or use fewer connections.", BASE_LOG_WARNING},
	[SESSION_END_AUTH_FAILED] = {"auth_failed", "28P01", "password authentication failed", NULL,
				     BASE_LOG_INFO},
	[SESSION_END_AUTH_UNSUPPORTED] = {"auth_unsupported", "28000",
					  "the client does not support the authentication method tern requires",
					  NULL, BASE_LOG_INFO},
	[SESSION_END_ADMIN_DENIED] = {"admin_denied", "28000", "not allowed to connect to the admin console",
				      "List the user in [admin] admin_users.", BASE_LOG_WARNING},
	[SESSION_END_PROTOCOL_VIOLATION] = {"protocol_violation", "08P01", "protocol violation", NULL,
					    BASE_LOG_INFO},
	[SESSION_END_FRAME_TOO_LARGE] = {"frame_too_large", "08P01", "message too large",
					 "The limit is [limits] max_client_frame_bytes.", BASE_LOG_INFO},
	[SESSION_END_UNSUPPORTED_REQUEST] = {"unsupported_request", "0A000", "request not supported by tern",
					     NULL, BASE_LOG_INFO},
	[SESSION_END_SERVER_REFUSED] = {"server_refused", "08006", "the server refused the connection", NULL,
					BASE_LOG_INFO},
	[SESSION_END_WAIT_TIMEOUT] = {"wait_timeout", "08P01",
				      "query_wait_timeout: no server connection became free in time",
				      "Raise [pool] pool_size or query_wait_timeout, or shorten transactions.",
				      BASE_LOG_WARNING},
	[SESSION_END_CLIENT_IDLE_TIMEOUT] = {"client_idle_timeout", "57P05",
					     "terminating connection due to client_idle_timeout",
					     "The limit is [limits] client_idle_timeout.", BASE_LOG_INFO},
	[SESSION_END_CLIENT_LOGIN_TIMEOUT] = {"client_login_timeout", "08P01",
					      "terminating connection due to client_login_timeout",
					      "The login took longer than [limits] client_login_timeout.", BASE_LOG_INFO},
	[SESSION_END_IDLE_TRANSACTION_TIMEOUT] = {"idle_transaction_timeout", "25P03",
						  "terminating connection due to idle_transaction_timeout",
						  "The transaction was rolled back; the limit is [limits] "
						  "idle_transaction_timeout.",
						  BASE_LOG_INFO},
	[SESSION_END_QUERY_TIMEOUT] = {"query_timeout", "57014",
				       "terminating connection due to query_timeout",
				       "The query may or may not have completed on the server; the limit is [limits] "
				       "query_timeout.",
				       BASE_LOG_WARNING},
	[SESSION_END_SERVER_LOST] = {"server_lost", "08006", "server connection lost during the session",
				     "The transaction, if any, may or may not have committed; check before retrying.",
				     BASE_LOG_WARNING},
	[SESSION_END_OUT_OF_MEMORY] = {"out_of_memory", "53200", "out of memory in tern", NULL, BASE_LOG_ERROR},
	[SESSION_END_SHUTDOWN] = {"shutdown", "57P01", "terminating connection: tern is shutting down", NULL,
				  BASE_LOG_INFO},
	[SESSION_END_TLS_FAILED] = {"tls_failed", NULL, NULL, NULL, BASE_LOG_INFO},
	[SESSION_END_TLS_REQUIRED] = {"tls_required", "28000", "TLS is required to connect to tern",
				      "Connect with sslmode=require (client_tls_sslmode = require).", BASE_LOG_INFO},
	[SESSION_END_TOO_MANY_STATEMENTS] = {"too_many_statements", "54000",
					     "too many prepared statements for one client",
					     "The limit is [limits] max_client_prepared_statements; Close or DEALLOCATE "
					     "statements no longer used.",
					     BASE_LOG_WARNING},
	[SESSION_END_PIPELINE_TOO_DEEP] = {"pipeline_too_deep", "54000",
					   "too many requests pipelined without reading their answers",
					   "Read the answers before sending more.", BASE_LOG_WARNING},
};

const struct session_end_info *session_end_info(enum session_end_reason reason)
{
	TERN_ASSERT(reason >= 0 && reason < SESSION_END_REASON_COUNT);
	return &reasons[reason];
}
