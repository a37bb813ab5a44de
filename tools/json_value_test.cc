#include "tools/json_value.h"

#include <gtest/gtest.h>

namespace uroce::tools {
namespace {

TEST(JsonValueTest, TelemetryAnswers) {
  auto v = ParseJson(R"({"/uroce/port":{"name":"a","port_id":0,"rx_frames":9,"gids":"10.5.0.1 fd00::1"}})");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  const JsonValue* port = v->Get("/uroce/port");
  ASSERT_NE(port, nullptr);
  ASSERT_EQ(port->kind, JsonValue::Kind::kObject);
  EXPECT_EQ(port->members.size(), 4u);
  EXPECT_EQ(port->Get("name")->text, "a");
  EXPECT_EQ(port->Get("rx_frames")->text, "9");
  EXPECT_EQ(port->Get("rx_frames")->kind, JsonValue::Kind::kNumber);
  auto list = ParseJson(R"({"/uroce/qps": ["a/17", "b/18"]})");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->Get("/uroce/qps")->items.size(), 2u);
  EXPECT_EQ(list->Get("/uroce/qps")->items[1].text, "b/18");
  auto empty = ParseJson(R"({"/uroce/qps": []})");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->Get("/uroce/qps")->items.empty());
  auto misc = ParseJson(R"([true, false, null, -1.5e3, "a\"b\u0041"])");
  ASSERT_TRUE(misc.ok());
  EXPECT_TRUE(misc->items[0].boolean);
  EXPECT_EQ(misc->items[3].text, "-1.5e3");
  EXPECT_EQ(misc->items[4].text, "a\"bA");
}

TEST(JsonValueTest, RejectsBrokenText) {
  EXPECT_FALSE(ParseJson("{").ok());
  EXPECT_FALSE(ParseJson(R"({"a" 1})").ok());
  EXPECT_FALSE(ParseJson("[1,]").ok());
  EXPECT_FALSE(ParseJson("{} x").ok());
  EXPECT_FALSE(ParseJson(std::string(100, '[')).ok());
}

}  // namespace
}  // namespace uroce::tools
