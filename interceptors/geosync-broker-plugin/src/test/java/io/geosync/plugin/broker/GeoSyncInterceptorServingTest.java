package io.geosync.plugin.broker;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.io.EOFException;
import java.io.IOException;
import java.lang.reflect.Proxy;
import java.math.BigInteger;
import java.util.Map;
import javax.servlet.FilterChain;
import javax.servlet.ServletOutputStream;
import javax.servlet.WriteListener;
import javax.servlet.http.HttpServletRequest;
import javax.servlet.http.HttpServletResponse;
import org.junit.jupiter.api.Test;

/** Serving the plugin's REST calls: a client that goes away mid-reply is not an error of the plugin. */
class GeoSyncInterceptorServingTest {

    private static HttpServletRequest get(String uri) {
        Map<String, Object> answers = Map.of("getRequestURI", uri, "getRemoteAddr", "127.0.0.1", "getMethod", "GET");
        return (HttpServletRequest) Proxy.newProxyInstance(
                GeoSyncInterceptorServingTest.class.getClassLoader(),
                new Class<?>[] {HttpServletRequest.class},
                (proxy, method, args) -> answers.get(method.getName()));
    }

    private static HttpServletResponse goneAfterHeaders() {
        ServletOutputStream out = new ServletOutputStream() {
            @Override
            public void write(int b) throws IOException {
                throw new EOFException("the client closed the connection");
            }

            @Override
            public void write(byte[] b, int off, int len) throws IOException {
                throw new EOFException("the client closed the connection");
            }

            @Override
            public boolean isReady() {
                return true;
            }

            @Override
            public void setWriteListener(WriteListener listener) {}
        };
        return (HttpServletResponse) Proxy.newProxyInstance(
                GeoSyncInterceptorServingTest.class.getClassLoader(),
                new Class<?>[] {HttpServletResponse.class},
                (proxy, method, args) -> switch (method.getName()) {
                    case "getOutputStream" -> out;
                    case "isCommitted" -> true;
                    default -> null;
                });
    }

    @Test
    void aClientGoneMidReplyIsCountedApartFromErrors() throws Exception {
        GeoSyncInterceptor plugin = new GeoSyncInterceptor();
        FilterChain chain = (request, response) -> {
            throw new AssertionError("the plugin's own path is not passed on");
        };
        plugin.onFilter(get(GeoSyncInterceptor.PREFIX + "status"), goneAfterHeaders(), chain);
        plugin.onFilter(get(GeoSyncInterceptor.PREFIX + "status"), goneAfterHeaders(), chain);
        Map<String, Object> status = plugin.status();
        assertEquals(BigInteger.ZERO, status.get("errors"));
        assertEquals(BigInteger.TWO, status.get("replies_abandoned"));
    }
}
